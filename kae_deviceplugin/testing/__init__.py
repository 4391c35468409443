"""Test support shipped with the package: kubelet and pod-resources emulators written from the
kubelet's contract, fake sysfs trees and their builder. The runtime never imports this package
(the `demo` command excepted)."""
