package integrity

import "github.com/chunkraft/chunkraft/copyset"

// Name names the service as a tenant of the chunkserver.
func (in *Service) Name() string { return "integrity" }

// Specs are the service's state machines: the integrity machine.
func (in *Service) Specs() []copyset.MachineSpec { return []copyset.MachineSpec{in.Spec()} }
