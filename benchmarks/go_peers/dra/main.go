// kae-go-dra: a minimal DRA driver on the upstream kubeletplugin helper, serving the same
// devices as kae-deviceplugin's DRA driver for the same tree, as a same-run reference for
// benchmarks/go_peers.py. It does what the helper's users do and nothing more: the helper
// registers, fetches claims, serialises calls and publishes the pool through its own slice
// controller; prepare writes one CDI spec per claim, unprepare removes it; an isolated device
// gets a NoSchedule taint, read from sysfs at the same interval as the Python driver's scan.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"kae-go-peers/internal/kae"
)

const (
	cdiKind     = "kae.openfuyao.com/claim"
	taintKey    = "kae.openfuyao.com/unhealthy"
	perSlice    = 64 // devices per slice where devices may carry taints
	specPrefix  = "kae-go-peer-"
	specVersion = "0.6.0"
)

type driver struct {
	name, node, sysfs, devRoot, cdiDir string
	devices                            map[string]kae.Device
	order                              []string
	helper                             *kubeletplugin.Helper
	cancel                             context.CancelFunc
}

func main() {
	d := &driver{}
	var kubeconfig, kubeletRoot, devicesFile string
	var interval time.Duration
	flag.StringVar(&d.name, "driver", "kae.openfuyao.com", "driver name")
	flag.StringVar(&d.node, "node-name", "", "this node")
	flag.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig")
	flag.StringVar(&kubeletRoot, "kubelet-root", "/var/lib/kubelet", "kubelet root")
	flag.StringVar(&d.cdiDir, "cdi-dir", "/var/run/cdi", "CDI spec directory")
	flag.StringVar(&d.sysfs, "sysfs-root", "/sys", "sysfs root")
	flag.StringVar(&d.devRoot, "dev-root", "/dev", "device node root")
	flag.StringVar(&devicesFile, "devices", "", "device list (benchmarks/go_peers.py)")
	flag.DurationVar(&interval, "health-interval", time.Second, "sysfs health poll interval")
	flag.Parse()
	if err := d.run(kubeconfig, kubeletRoot, devicesFile, interval); err != nil {
		log.Fatalf("kae-go-dra: %v", err)
	}
}

func (d *driver) run(kubeconfig, kubeletRoot, devicesFile string, interval time.Duration) error {
	node, err := kae.Load(devicesFile)
	if err != nil {
		return err
	}
	d.devices = map[string]kae.Device{}
	for _, dev := range node.Devices {
		d.devices[dev.Slice.Name] = dev
		d.order = append(d.order, dev.Slice.Name)
	}
	config, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		return err
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer cancel()
	d.cancel = cancel
	pluginDir := filepath.Join(kubeletRoot, "plugins", d.name)
	if err := os.MkdirAll(pluginDir, 0o750); err != nil { // the helper expects it to exist
		return err
	}
	d.helper, err = kubeletplugin.Start(ctx, d,
		kubeletplugin.KubeClient(client),
		kubeletplugin.NodeName(d.node),
		kubeletplugin.DriverName(d.name),
		kubeletplugin.RegistrarDirectoryPath(filepath.Join(kubeletRoot, "plugins_registry")),
		kubeletplugin.PluginDataDirectoryPath(pluginDir),
	)
	if err != nil {
		return err
	}
	defer d.helper.Stop()
	log.Printf("kae-go-dra: serving %d devices for node %s", len(d.order), d.node)
	return d.publishHealth(ctx, interval)
}

// publishHealth publishes the pool, then again whenever a device's health changes.
func (d *driver) publishHealth(ctx context.Context, interval time.Duration) error {
	var last map[string]bool
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		health := map[string]bool{}
		for name, dev := range d.devices {
			health[name] = kae.Healthy(d.sysfs, dev.Uacce)
		}
		if !equal(health, last) {
			if err := d.helper.PublishResources(ctx, d.resources(health)); err != nil {
				return err
			}
			last = health
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
	}
}

func equal(a, b map[string]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func (d *driver) resources(health map[string]bool) resourceslice.DriverResources {
	var slices []resourceslice.Slice
	for start := 0; start < len(d.order); start += perSlice {
		end := min(start+perSlice, len(d.order))
		var devices []resourceapi.Device
		for _, name := range d.order[start:end] {
			source := d.devices[name].Slice
			device := *source.DeepCopy()
			device.Taints = nil
			if !health[name] {
				now := metav1.Now()
				device.Taints = []resourceapi.DeviceTaint{{
					Key: taintKey, Value: "isolated", Effect: resourceapi.DeviceTaintEffectNoSchedule,
					TimeAdded: &now,
				}}
			}
			devices = append(devices, device)
		}
		slices = append(slices, resourceslice.Slice{Devices: devices})
	}
	return resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{d.node: {Slices: slices}}}
}

func (d *driver) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	result := map[types.UID]kubeletplugin.PrepareResult{}
	for _, claim := range claims {
		result[claim.UID] = d.prepare(claim)
	}
	return result, nil
}

type cdiSpec struct {
	Version string      `json:"cdiVersion"`
	Kind    string      `json:"kind"`
	Devices []cdiDevice `json:"devices"`
}

type cdiDevice struct {
	Name  string   `json:"name"`
	Edits cdiEdits `json:"containerEdits"`
}

type cdiEdits struct {
	Env         []string        `json:"env,omitempty"`
	DeviceNodes []cdiDeviceNode `json:"deviceNodes,omitempty"`
}

type cdiDeviceNode struct {
	Path     string `json:"path"`
	HostPath string `json:"hostPath"`
}

func (d *driver) prepare(claim *resourceapi.ResourceClaim) kubeletplugin.PrepareResult {
	if claim.Status.Allocation == nil {
		return kubeletplugin.PrepareResult{Err: fmt.Errorf("claim %s is not allocated", claim.Name)}
	}
	spec := cdiSpec{Version: specVersion, Kind: cdiKind}
	var devices []kubeletplugin.Device
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver != d.name || r.Pool != d.node {
			continue
		}
		dev, ok := d.devices[r.Device]
		if !ok {
			return kubeletplugin.PrepareResult{Err: fmt.Errorf("device %s is not on this node", r.Device)}
		}
		name := fmt.Sprintf("%s-%s", claim.UID, r.Device)
		spec.Devices = append(spec.Devices, cdiDevice{Name: name, Edits: cdiEdits{
			Env: []string{fmt.Sprintf("KAE_%s_DEVICES=%s", strings.ToUpper(dev.Engine), dev.Uacce)},
			DeviceNodes: []cdiDeviceNode{{
				Path: "/dev/" + dev.Uacce, HostPath: filepath.Join(d.devRoot, dev.Uacce),
			}},
		}})
		devices = append(devices, kubeletplugin.Device{
			Requests: []string{r.Request}, PoolName: r.Pool, DeviceName: r.Device,
			CDIDeviceIDs: []string{cdiKind + "=" + name},
		})
	}
	if err := writeSpec(d.specPath(claim.UID), spec); err != nil {
		return kubeletplugin.PrepareResult{Err: err}
	}
	return kubeletplugin.PrepareResult{Devices: devices}
}

func (d *driver) specPath(uid types.UID) string {
	return filepath.Join(d.cdiDir, specPrefix+string(uid)+".json")
}

// writeSpec replaces the file in one rename, as CDI runtimes may read it at any moment.
func writeSpec(path string, spec cdiSpec) error {
	data, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	temporary := path + ".tmp"
	if err := os.WriteFile(temporary, data, 0o644); err != nil {
		return err
	}
	return os.Rename(temporary, path)
}

func (d *driver) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	result := map[types.UID]error{}
	for _, claim := range claims {
		err := os.Remove(d.specPath(claim.UID))
		if errors.Is(err, os.ErrNotExist) {
			err = nil
		}
		result[claim.UID] = err
	}
	return result, nil
}

func (d *driver) HandleError(ctx context.Context, err error, msg string) {
	log.Printf("kae-go-dra: %s: %v", msg, err)
	if !errors.Is(err, kubeletplugin.ErrRecoverable) {
		d.cancel()
	}
}

func (d *driver) WatchHealthStatus(ctx context.Context, reports chan<- kubeletplugin.DeviceHealthReport) error {
	return kubeletplugin.ErrHealthNotSupported
}
