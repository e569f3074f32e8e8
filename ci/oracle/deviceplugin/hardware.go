package main

// The node's hardware as NVML would report it: NVIDIA's mock NVML server
// (github.com/NVIDIA/go-nvml pkg/nvml/mock/server, with the per-GPU tables of
// pkg/nvml/mock/gpus), extended with MIG device handles. The mock creates GPU and
// compute instances but has no MIG device handles (GetMigDeviceHandleByIndex,
// GetGpuInstanceById, GetComputeInstanceById are unset), which go-nvlib needs to walk
// MIG devices; hardware.go fills in exactly those, with the values the mock's own
// profile tables give. Nothing here decides a label or a resource: upstream code does.

import (
	"fmt"
	"strings"

	"github.com/NVIDIA/go-nvlib/pkg/nvlib/device"
	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"github.com/google/uuid"
)

// Hardware is the JSON hardware description of one node.
type Hardware struct {
	// GPU is a key of gpuModels: the mock table the node's GPUs are built from.
	GPU string `json:"gpu"`
	// Name overrides the product name NVML reports (e.g. another board of the same table).
	Name string `json:"name,omitempty"`
	// MemoryMiB overrides the GPU's total memory.
	MemoryMiB uint64 `json:"memoryMiB,omitempty"`
	Count     int    `json:"count"`
	// MIG lists, per GPU index, the MIG devices configured on it (profile names as
	// `nvidia-smi mig -lgip` prints them, e.g. "1g.10gb", "1g.10gb+me"); a GPU with
	// an entry has MIG mode enabled, an empty list means enabled with no devices.
	MIG map[string][]string `json:"mig,omitempty"`
	// CudaMajor, CudaMinor: compute capability, for gpu "no-mig" only.
	CudaMajor int `json:"cudaMajor,omitempty"`
	CudaMinor int `json:"cudaMinor,omitempty"`
	// MachineType is the DMI product name GFD reads (nvidia.com/gpu.machine).
	MachineType string `json:"machineType,omitempty"`
}

// gpuModels are the mock GPU tables go-nvml ships, by a short key.
var gpuModels = map[string]gpus.Config{
	"A100-SXM4-40GB":  gpus.A100_SXM4_40GB,
	"A100-SXM4-80GB": gpus.A100_SXM4_80GB,
	"A100-PCIE-40GB": gpus.A100_PCIE_40GB,
	"A100-PCIE-80GB": gpus.A100_PCIE_80GB,
	"A30-24GB":       gpus.A30_PCIE_24GB,
	"H100-SXM5-80GB": gpus.H100_SXM5_80GB,
	"H200-SXM5-141GB": h200(),
	"B200-SXM5-180GB": gpus.B200_SXM5_180GB,
}

// h200 is go-nvml's H200 table with each GPU instance profile's memory as a real H200
// reports it. The mock's MemorySizeMB (18432 / 35840 / 72704 / 144384 MiB of 144384, its
// comments' nominal GB) make go-nvlib's naming (device/mig_profile.go getMigMemorySizeGB:
// the memory fraction rounded up to eighths) say 1g.35gb for 1g.18gb and 3g.88gb for
// 3g.71gb, names no H200 has. `nvidia-smi mig -lgip` on an 8x H200 node
// (NVIDIA/mig-parted#120, "Add support for the NVIDIA H200 GPU") lists 16.00 GiB for
// 1g.18gb and 1g.18gb+me, 32.25 for 1g.35gb and 2g.35gb, 69.50 for 3g.71gb and 4g.71gb,
// 139.75 for 7g.141gb: those values (in MiB) replace the mock's, by profile id; the rest
// of the table is the mock's. tests/oracle/test_device_plugin_oracle.py checks the names
// go-nvlib derives from it.
func h200() gpus.Config {
	cfg := gpus.H200_SXM5_141GB
	lgip := map[int]uint64{
		nvml.GPU_INSTANCE_PROFILE_1_SLICE: 16384, nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1: 16384,
		nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV2: 33024, nvml.GPU_INSTANCE_PROFILE_2_SLICE: 33024,
		nvml.GPU_INSTANCE_PROFILE_3_SLICE: 71168, nvml.GPU_INSTANCE_PROFILE_4_SLICE: 71168,
		nvml.GPU_INSTANCE_PROFILE_7_SLICE: 143104,
	}
	profiles := map[int]nvml.GpuInstanceProfileInfo{}
	for id, p := range cfg.MIGProfiles.GpuInstanceProfiles {
		if mib, ok := lgip[id]; ok {
			p.MemorySizeMB = mib
		}
		profiles[id] = p
	}
	cfg.MIGProfiles.GpuInstanceProfiles = profiles
	return cfg
}

// migDevice is one MIG device handle over a mock GPU instance / compute instance.
type migDevice struct {
	mock.Device
}

// newServer builds the mock NVML server of a hardware description.
func newServer(hw Hardware) (*server.Server, error) {
	cfg, ok := gpuModels[hw.GPU]
	if hw.GPU == "no-mig" {
		// A GPU without MIG (e.g. GeForce, L4, L40S): name, memory and compute
		// capability from the description; NVML reports MIG as not supported.
		cfg, ok = gpus.Config{Name: hw.Name, MemoryMB: hw.MemoryMiB, Brand: nvml.BRAND_NVIDIA,
			Architecture: nvml.DEVICE_ARCH_ADA, CudaMajor: hw.CudaMajor, CudaMinor: hw.CudaMinor}, true
		if hw.Name == "" || hw.MemoryMiB == 0 || hw.CudaMajor == 0 {
			return nil, fmt.Errorf("hardware: gpu no-mig needs name, memoryMiB and cudaMajor")
		}
	}
	if !ok {
		keys := make([]string, 0, len(gpuModels))
		for k := range gpuModels {
			keys = append(keys, k)
		}
		return nil, fmt.Errorf("hardware: unknown gpu %q (one of %s)", hw.GPU, strings.Join(keys, ", "))
	}
	if hw.Name != "" {
		cfg.Name = hw.Name
	}
	if hw.MemoryMiB != 0 {
		cfg.MemoryMB = hw.MemoryMiB
	}
	if hw.Count < 1 {
		return nil, fmt.Errorf("hardware: count must be >= 1")
	}
	s, err := server.New(server.WithGPUs(gpus.Multiple(hw.Count, cfg)...),
		server.WithDriverVersion("550.54.15"), server.WithNVMLVersion("12.550.54.15"),
		server.WithCUDADriverVersion(12040))
	if err != nil {
		return nil, err
	}
	lib := device.New(s)
	for i, d := range s.Devices {
		md := d.(*server.Device)
		// The mock's PciInfo has no bus id; GFD and the plugin read sysfs by it.
		busID := fmt.Sprintf("00000000:%02x:00.0", i+1)
		pciDeviceID := cfg.PciDeviceId
		md.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) {
			p := nvml.PciInfo{PciDeviceId: pciDeviceID}
			for k := 0; k < len(busID); k++ {
				p.BusId[k] = uint8(busID[k])
			}
			return p, nvml.SUCCESS
		}
		// No NVLink fabric (no IMEX domain): lm/imex.go then adds no clique label.
		md.GetGpuFabricInfoFunc = func() (nvml.GpuFabricInfo, nvml.Return) {
			return nvml.GpuFabricInfo{}, nvml.ERROR_NOT_SUPPORTED
		}
		names, enabled := hw.MIG[fmt.Sprint(i)]
		if len(cfg.MIGProfiles.GpuInstanceProfiles) == 0 {
			if enabled {
				return nil, fmt.Errorf("hardware: gpu %d (%s) is not MIG capable", i, cfg.Name)
			}
			md.GetMigModeFunc = func() (int, int, nvml.Return) { return 0, 0, nvml.ERROR_NOT_SUPPORTED }
			md.GetMaxMigDeviceCountFunc = func() (int, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
			continue
		}
		if enabled {
			md.MigMode = nvml.DEVICE_MIG_ENABLE
		}
		// A MIG-capable GPU lists MIG device handles (none while MIG is disabled).
		if err := addMigDevices(lib, md, names); err != nil {
			return nil, fmt.Errorf("hardware: gpu %d: %v", i, err)
		}
	}
	return s, nil
}

// addMigDevices creates, on one mock GPU, a GPU and compute instance per profile name
// and the MIG device handles NVML would then list.
func addMigDevices(lib device.Interface, gpu *server.Device, names []string) error {
	dev, err := lib.NewDevice(gpu)
	if err != nil {
		return err
	}
	// Several (GI, CI, engine) profile id triples can print the same name (e.g. a CI
	// profile revision); the mock's tables hold one of them: take the first it has.
	profiles := map[string][]device.MigProfile{}
	if err := dev.VisitMigProfiles(func(p device.MigProfile) error {
		profiles[p.String()] = append(profiles[p.String()], p)
		return nil
	}); err != nil {
		return err
	}
	var handles []nvml.Device
	gis := map[uint32]nvml.GpuInstance{}
	for _, name := range names {
		candidates, ok := profiles[name]
		if !ok {
			known := make([]string, 0, len(profiles))
			for k := range profiles {
				known = append(known, k)
			}
			return fmt.Errorf("unknown MIG profile %q (this GPU has %s)", name, strings.Join(known, ", "))
		}
		var giInfo nvml.GpuInstanceProfileInfo
		var ciInfo nvml.ComputeInstanceProfileInfo
		var gi nvml.GpuInstance
		found := false
		for _, p := range candidates {
			info := p.GetInfo()
			var ret nvml.Return
			if giInfo, ret = gpu.GetGpuInstanceProfileInfo(info.GIProfileID); ret != nvml.SUCCESS {
				continue
			}
			if gi, ret = gpu.CreateGpuInstance(&giInfo); ret != nvml.SUCCESS {
				return fmt.Errorf("create GPU instance %s: %v", name, ret)
			}
			if ciInfo, ret = gi.GetComputeInstanceProfileInfo(info.CIProfileID, info.CIEngProfileID); ret != nvml.SUCCESS {
				_ = gi.Destroy()
				continue
			}
			found = true
			break
		}
		if !found {
			return fmt.Errorf("MIG profile %q: no GPU/compute instance profile of the mock table matches", name)
		}
		ci, ret := gi.CreateComputeInstance(&ciInfo)
		if ret != nvml.SUCCESS {
			return fmt.Errorf("create compute instance %s: %v", name, ret)
		}
		giState, _ := gi.GetInfo()
		ciState, _ := ci.GetInfo()
		gis[giState.Id] = gi
		handles = append(handles, newMigHandle(gpu, giInfo, ciInfo, giState.Id, ciState.Id, gi, ci))
	}
	gpu.GetMaxMigDeviceCountFunc = func() (int, nvml.Return) { return 7, nvml.SUCCESS }
	gpu.GetMigDeviceHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
		if i < 0 || i >= len(handles) {
			return nil, nvml.ERROR_NOT_FOUND
		}
		return handles[i], nvml.SUCCESS
	}
	gpu.GetGpuInstanceByIdFunc = func(id int) (nvml.GpuInstance, nvml.Return) {
		gi, ok := gis[uint32(id)]
		if !ok {
			return nil, nvml.ERROR_NOT_FOUND
		}
		return gi, nvml.SUCCESS
	}
	gpu.IsMigDeviceHandleFunc = func() (bool, nvml.Return) { return false, nvml.SUCCESS }
	return nil
}

func newMigHandle(parent *server.Device, gip nvml.GpuInstanceProfileInfo, cip nvml.ComputeInstanceProfileInfo,
	giID, ciID uint32, gi nvml.GpuInstance, ci nvml.ComputeInstance) nvml.Device {
	m := &migDevice{}
	id := "MIG-" + uuid.New().String()
	m.GetUUIDFunc = func() (string, nvml.Return) { return id, nvml.SUCCESS }
	m.IsMigDeviceHandleFunc = func() (bool, nvml.Return) { return true, nvml.SUCCESS }
	m.GetDeviceHandleFromMigDeviceHandleFunc = func() (nvml.Device, nvml.Return) { return parent, nvml.SUCCESS }
	m.GetGpuInstanceIdFunc = func() (int, nvml.Return) { return int(giID), nvml.SUCCESS }
	m.GetComputeInstanceIdFunc = func() (int, nvml.Return) { return int(ciID), nvml.SUCCESS }
	m.GetAttributesFunc = func() (nvml.DeviceAttributes, nvml.Return) {
		return nvml.DeviceAttributes{
			MultiprocessorCount:       cip.MultiprocessorCount,
			SharedCopyEngineCount:     cip.SharedCopyEngineCount,
			SharedDecoderCount:        cip.SharedDecoderCount,
			SharedEncoderCount:        cip.SharedEncoderCount,
			SharedJpegCount:           cip.SharedJpegCount,
			SharedOfaCount:            cip.SharedOfaCount,
			GpuInstanceSliceCount:     gip.SliceCount,
			ComputeInstanceSliceCount: cip.SliceCount,
			MemorySizeMB:              gip.MemorySizeMB,
		}, nvml.SUCCESS
	}
	m.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) {
		return nvml.Memory{Total: gip.MemorySizeMB * 1024 * 1024}, nvml.SUCCESS
	}
	m.GetMinorNumberFunc = parent.GetMinorNumberFunc
	m.GetCudaComputeCapabilityFunc = parent.GetCudaComputeCapabilityFunc
	m.GetPciInfoFunc = parent.GetPciInfoFunc
	// The compute instance by id, as NVML's GetComputeInstanceById on the GPU instance.
	if g, ok := gi.(*server.GpuInstance); ok {
		prev := g.GetComputeInstanceByIdFunc
		g.GetComputeInstanceByIdFunc = func(id int) (nvml.ComputeInstance, nvml.Return) {
			if uint32(id) == ciID {
				return ci, nvml.SUCCESS
			}
			if prev != nil {
				return prev(id)
			}
			return nil, nvml.ERROR_NOT_FOUND
		}
	}
	return m
}
