package disagg

import "github.com/chunkraft/chunkraft/copyset"

// Name names the service as a tenant of the chunkserver.
func (s *Service) Name() string { return "disagg" }

// Specs are the service's state machines: the disagg machine. The read
// views' op (kinds.View) is applied by the chunk store's host, which owns
// the pre-images (chunkstore/view_fsm.go).
func (s *Service) Specs() []copyset.MachineSpec { return []copyset.MachineSpec{Spec()} }
