// Times the scheduler's per-node DRA work, as its DynamicResources Filter does it for every node
// it tries: structured.Allocator.Allocate (k8s.io/dynamic-resource-allocation v0.37.2, the
// scheduler's own code, with the features 1.37 turns on) for one node whose one ResourceSlice
// holds the devices of a variant, and one claim. The allocator is made once per pair (the
// scheduler makes it once per pod); each pair is timed 30 times in rounds over all pairs, 500
// calls each, and the fastest round is kept, so that a noisy machine hurts every pair alike.
//
// Input (written by benchmarks/sched_alloc.py): {"variants": {name: [Device]}, "classes":
// [DeviceClass], "claims": {name: ResourceClaimSpec}, "pairs": [[variant, claim]]}.
// Output: one line per pair, "<claim> <variant> <microseconds per Allocate>".
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
)

type input struct {
	Variants map[string][]resourceapi.Device          `json:"variants"`
	Classes  []resourceapi.DeviceClass                `json:"classes"`
	Claims   map[string]resourceapi.ResourceClaimSpec `json:"claims"`
	Pairs    [][2]string                              `json:"pairs"` // variant, claim
}

type lister map[string]*resourceapi.DeviceClass

func (l lister) List() ([]*resourceapi.DeviceClass, error) {
	out := []*resourceapi.DeviceClass{}
	for _, c := range l {
		out = append(out, c)
	}
	return out, nil
}
func (l lister) Get(name string) (*resourceapi.DeviceClass, error) {
	c, ok := l[name]
	if !ok {
		return nil, fmt.Errorf("no class %s", name)
	}
	return c, nil
}

func main() {
	raw, _ := os.ReadFile(os.Args[1])
	var in input
	if err := json.Unmarshal(raw, &in); err != nil {
		panic(err)
	}
	classes := lister{}
	for i := range in.Classes {
		classes[in.Classes[i].Name] = &in.Classes[i]
	}
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
	features := structured.Features{AdminAccess: true, PrioritizedList: true, PartitionableDevices: true,
		DeviceTaints: true, DeviceBindingAndStatus: true, ConsumableCapacity: true}
	state := structured.AllocatedState{AllocatedDevices: sets.New[structured.DeviceID](),
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](), AggregatedCapacity: structured.NewConsumedCapacityCollection()}
	ctx := context.Background()
	cache := cel.NewCache(100, cel.Features{})
	type job struct {
		name  string
		alloc structured.Allocator
		claim *resourceapi.ResourceClaim
		best  time.Duration
	}
	jobs := []*job{}
	for _, pair := range in.Pairs {
		nodeName := "n1"
		slice := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "n1-kae"},
			Spec: resourceapi.ResourceSliceSpec{Driver: "kae.openfuyao.com", NodeName: &nodeName,
				Pool: resourceapi.ResourcePool{Name: "n1", Generation: 1, ResourceSliceCount: 1}, Devices: in.Variants[pair[0]]}}
		claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns", UID: types.UID("uid-1")},
			Spec: in.Claims[pair[1]]}
		alloc, err := structured.NewAllocator(ctx, features, state, classes, []*resourceapi.ResourceSlice{slice}, cache)
		if err != nil {
			panic(err)
		}
		jobs = append(jobs, &job{pair[1] + " " + pair[0], alloc, claim, time.Duration(1 << 62)})
	}
	const calls = 500
	for round := 0; round < 30; round++ {
		for _, j := range jobs {
			start := time.Now()
			for i := 0; i < calls; i++ {
				res, err := j.alloc.Allocate(ctx, node, []*resourceapi.ResourceClaim{j.claim})
				if err != nil || len(res) != 1 {
					panic(fmt.Sprintf("%s %v %v", j.name, err, res))
				}
			}
			if el := time.Since(start); el < j.best {
				j.best = el
			}
		}
	}
	for _, j := range jobs {
		fmt.Printf("%s %.2f\n", j.name, float64(j.best.Nanoseconds())/1000/calls)
	}
}
