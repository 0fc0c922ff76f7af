package chunkserver

import (
	"context"
	"errors"

	pb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
	"google.golang.org/protobuf/proto"
)

// configService implements curve.chunkserver.ConfigService over the
// server's configuration (upstream defines it but never implemented it).
// Keys, values, the runtime-changeable keys and persistence: see
// config_runtime.go. Every refusal is CONFIG_OP_STATUS_FAILURE_UNKNOWN with
// the reason in value.
type configService struct {
	pb.UnimplementedConfigServiceServer
	rt *runtimeState
}

func configResponse(value string, err error) (*pb.ConfigResponse, error) {
	st := pb.CONFIG_OP_STATUS_CONFIG_OP_STATUS_SUCCESS
	if err != nil {
		st = pb.CONFIG_OP_STATUS_CONFIG_OP_STATUS_FAILURE_UNKNOWN
		var ce *configError
		if errors.As(err, &ce) {
			value = ce.msg
		} else {
			value = err.Error()
		}
	}
	return &pb.ConfigResponse{Status: st.Enum(), Value: proto.String(value)}, nil
}

// Get returns the current value of one key ("raft.trailing_logs").
func (s *configService) Get(ctx context.Context, req *pb.ConfigRequest) (*pb.ConfigResponse, error) {
	return configResponse(s.rt.get(req.GetKey()))
}

// Set changes a runtime key at once and persists it to the config file;
// any other key is refused as needing a restart, an unknown key or an
// invalid value is refused too, and a refusal changes nothing. value is the
// new value as the configuration now reads it.
func (s *configService) Set(ctx context.Context, req *pb.ConfigRequest) (*pb.ConfigResponse, error) {
	return configResponse(s.rt.set(req.GetKey(), req.GetValue()))
}

// Dump returns "key=value" lines sorted by key. The request key is a
// prefix filter on whole key segments: "" dumps every key, "raft" the raft.*
// keys, "raft.trailing_logs" just that one; a filter matching nothing is
// FAILURE_UNKNOWN.
func (s *configService) Dump(ctx context.Context, req *pb.ConfigRequest) (*pb.ConfigResponse, error) {
	return configResponse(s.rt.dump(req.GetKey()))
}
