// kae-go-deviceplugin: a minimal device plugin on grpc-go and the kubelet's v1beta1 API,
// serving the same devices as kae-deviceplugin for the same tree (openfuyao.com/kae.<engine>,
// device IDs the PCI addresses), as a same-run reference for benchmarks/go_peers.py. One
// server per resource; ListAndWatch re-sends on a health change read from sysfs at the same
// interval as the Python plugin's scan; Allocate gives the device nodes and one variable;
// a new kubelet.sock (a kubelet restart) registers every resource again.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"kae-go-peers/internal/kae"
)

type server struct {
	pluginapi.UnimplementedDevicePluginServer
	engine, resource, socket, devRoot, sysfs string
	devices                                  map[string]kae.Device // by PCI address
	mu                                       sync.Mutex
	changed                                  chan struct{}
	health                                   map[string]bool
	grpc                                     *grpc.Server
}

func main() {
	var dir, devicesFile, sysfs, devRoot, prefix string
	var interval time.Duration
	flag.StringVar(&dir, "device-plugin-dir", "/var/lib/kubelet/device-plugins", "kubelet's device-plugin directory")
	flag.StringVar(&devicesFile, "devices", "", "device list (benchmarks/go_peers.py)")
	flag.StringVar(&sysfs, "sysfs-root", "/sys", "sysfs root")
	flag.StringVar(&devRoot, "dev-root", "/dev", "device node root")
	flag.DurationVar(&interval, "health-interval", time.Second, "sysfs health poll interval")
	flag.StringVar(&prefix, "resource-prefix", "openfuyao.com/kae.", "resource name before the engine")
	flag.Parse()
	node, err := kae.Load(devicesFile)
	if err != nil {
		log.Fatalf("kae-go-deviceplugin: %v", err)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer cancel()
	servers := serversFor(node, prefix, dir, devRoot, sysfs)
	if err := run(ctx, servers, dir, interval); err != nil {
		log.Fatalf("kae-go-deviceplugin: %v", err)
	}
}

func serversFor(node *kae.Node, prefix, dir, devRoot, sysfs string) []*server {
	byEngine := map[string]*server{}
	for _, dev := range node.Devices {
		s, ok := byEngine[dev.Engine]
		if !ok {
			s = &server{
				engine: dev.Engine, resource: prefix + dev.Engine,
				socket: filepath.Join(dir, "kae-go-"+dev.Engine+".sock"), devRoot: devRoot,
				sysfs: sysfs, devices: map[string]kae.Device{}, changed: make(chan struct{}),
				health: map[string]bool{},
			}
			byEngine[dev.Engine] = s
		}
		s.devices[dev.PCI] = dev
	}
	var servers []*server
	for _, s := range byEngine {
		servers = append(servers, s)
	}
	sort.Slice(servers, func(i, j int) bool { return servers[i].engine < servers[j].engine })
	return servers
}

// run serves and registers every resource, polls health, and registers again whenever the
// kubelet's socket is new (a kubelet restart removes every socket in the directory).
func run(ctx context.Context, servers []*server, dir string, interval time.Duration) error {
	kubelet := filepath.Join(dir, "kubelet.sock")
	var registered os.FileInfo
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	defer func() {
		for _, s := range servers {
			s.stop()
		}
	}()
	for {
		for _, s := range servers {
			s.poll()
		}
		if info, err := os.Stat(kubelet); err == nil && (registered == nil || !os.SameFile(info, registered)) {
			if err := startAll(ctx, servers, kubelet); err != nil {
				log.Printf("kae-go-deviceplugin: %v (retrying)", err)
			} else {
				registered = info
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
	}
}

func startAll(ctx context.Context, servers []*server, kubelet string) error {
	for _, s := range servers {
		s.stop()
		if err := s.start(); err != nil {
			return err
		}
		if err := s.register(ctx, kubelet); err != nil {
			return err
		}
	}
	return nil
}

func (s *server) start() error {
	_ = os.Remove(s.socket)
	listener, err := net.Listen("unix", s.socket)
	if err != nil {
		return err
	}
	s.grpc = grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(s.grpc, s)
	go func() { _ = s.grpc.Serve(listener) }()
	return nil
}

func (s *server) stop() {
	if s.grpc != nil {
		s.grpc.Stop()
		s.grpc = nil
		_ = os.Remove(s.socket)
	}
}

func (s *server) register(ctx context.Context, kubelet string) error {
	conn, err := grpc.NewClient("unix://"+kubelet, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version: pluginapi.Version, Endpoint: filepath.Base(s.socket), ResourceName: s.resource,
		Options: &pluginapi.DevicePluginOptions{},
	})
	if err != nil {
		return fmt.Errorf("register %s: %w", s.resource, err)
	}
	return nil
}

// poll reads every device's health; a change wakes every ListAndWatch stream.
func (s *server) poll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	changed := false
	for pci, dev := range s.devices {
		healthy := kae.Healthy(s.sysfs, dev.Uacce)
		if old, ok := s.health[pci]; !ok || old != healthy {
			s.health[pci] = healthy
			changed = true
		}
	}
	if changed {
		close(s.changed)
		s.changed = make(chan struct{})
	}
}

func (s *server) snapshot() (*pluginapi.ListAndWatchResponse, chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	response := &pluginapi.ListAndWatchResponse{}
	for pci, dev := range s.devices {
		health := pluginapi.Healthy
		if !s.health[pci] {
			health = pluginapi.Unhealthy
		}
		device := &pluginapi.Device{ID: pci, Health: health}
		if dev.NUMA >= 0 {
			device.Topology = &pluginapi.TopologyInfo{Nodes: []*pluginapi.NUMANode{{ID: dev.NUMA}}}
		}
		response.Devices = append(response.Devices, device)
	}
	sort.Slice(response.Devices, func(i, j int) bool { return response.Devices[i].ID < response.Devices[j].ID })
	return response, s.changed
}

func (s *server) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

func (s *server) ListAndWatch(_ *pluginapi.Empty, stream grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	for {
		response, changed := s.snapshot()
		if err := stream.Send(response); err != nil {
			return err
		}
		select {
		case <-stream.Context().Done():
			return nil
		case <-changed:
		}
	}
}

func (s *server) Allocate(_ context.Context, request *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	response := &pluginapi.AllocateResponse{}
	for _, container := range request.ContainerRequests {
		answer := &pluginapi.ContainerAllocateResponse{Envs: map[string]string{}}
		var names []string
		for _, id := range container.DevicesIds {
			dev, ok := s.devices[id]
			if !ok {
				return nil, fmt.Errorf("unknown device %s", id)
			}
			names = append(names, dev.Uacce)
			answer.Devices = append(answer.Devices, &pluginapi.DeviceSpec{
				ContainerPath: "/dev/" + dev.Uacce, HostPath: filepath.Join(s.devRoot, dev.Uacce),
				Permissions: "rw",
			})
		}
		answer.Envs["KAE_"+strings.ToUpper(s.engine)+"_DEVICES"] = strings.Join(names, ",")
		response.ContainerResponses = append(response.ContainerResponses, answer)
	}
	return response, nil
}
