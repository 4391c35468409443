// Package kae holds what both Go peers read: the devices to serve, as the Python driver's own
// slice builder described them for the same tree, and their health from the same sysfs files.
//
// The peers are references for benchmarks/go_peers.py, not products: they read a device list
// instead of discovering devices, so that both drivers publish exactly the same devices with
// exactly the same attributes, and the comparison is of the drivers, not of two discoveries.
package kae

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
)

// Device is one device of the node as both peers serve it.
type Device struct {
	// Slice is the ResourceSlice device the Python driver publishes for it (name and
	// attributes), taints removed: the peer adds its own.
	Slice resourceapi.Device `json:"slice"`
	// Uacce is the class device name (hisi_hpre-2): /dev/<Uacce> and
	// <sysfs>/class/uacce/<Uacce>/isolate.
	Uacce string `json:"uacce"`
	// Engine is hpre, sec or zip; PCI the function's address; NUMA its node (-1: none).
	Engine string `json:"engine"`
	PCI    string `json:"pci"`
	NUMA   int64  `json:"numa"`
}

// Node is the file benchmarks/go_peers.py writes for a tree.
type Node struct {
	Devices []Device `json:"devices"`
}

// Load reads the device list written for the peers.
func Load(path string) (*Node, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var node Node
	if err := json.Unmarshal(data, &node); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &node, nil
}

// Healthy reads a device's isolate attribute as the Python driver does: "1" is unhealthy, a
// missing attribute (older kernels) healthy, a missing class entry unhealthy.
func Healthy(sysfs, uacce string) bool {
	dir := filepath.Join(sysfs, "class", "uacce", uacce)
	if _, err := os.Stat(dir); err != nil {
		return false
	}
	data, err := os.ReadFile(filepath.Join(dir, "isolate"))
	if err != nil {
		return os.IsNotExist(err)
	}
	return strings.TrimSpace(string(data)) != "1"
}
