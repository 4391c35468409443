"""What operators see: metrics computed at scrape time, the HTTP endpoint, event and log
lines, and the NFD feature file."""
