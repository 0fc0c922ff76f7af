package datasync

import "github.com/chunkraft/chunkraft/copyset"

// Name names the service as a tenant of the chunkserver.
func (s *Service) Name() string { return "sync" }

// Specs are the service's state machines: the sync machine.
func (s *Service) Specs() []copyset.MachineSpec { return []copyset.MachineSpec{Spec()} }
