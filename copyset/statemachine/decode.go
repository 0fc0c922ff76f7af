package statemachine

import (
	"encoding/json"
	"errors"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// ErrUnknownOp is what a Decode returns for a payload that decodes to no
// op this build knows.
var ErrUnknownOp = errors.New("no op this version knows")

// DecodeProto returns a Config.Decode for protobuf ops: a fresh() op
// unmarshalled from the payload, ErrUnknownOp when known says it holds no
// op this build knows (an empty oneof: a newer build's op).
func DecodeProto[O proto.Message](fresh func() O, known func(O) bool) func(payload []byte) (O, error) {
	return func(payload []byte) (O, error) {
		op := fresh()
		if err := proto.Unmarshal(payload, op); err != nil {
			var zero O
			return zero, err
		}
		if !known(op) {
			var zero O
			return zero, ErrUnknownOp
		}
		return op, nil
	}
}

// DecodeJSON decodes a JSON line into a new T: a Config.DecodeState or
// Decode for a tenant whose lines or ops are encoding/json.
func DecodeJSON[T any](b []byte) (*T, error) {
	v := new(T)
	return v, json.Unmarshal(b, v)
}

// ProtoJSON is the whole-state line of a machine whose state is a
// protobuf message: its protojson form (Config.EncodeState, DecodeState).
type ProtoJSON[S proto.Message] struct {
	// New returns an empty state to decode into.
	New func() S
}

// Encode is a Config.EncodeState.
func (ProtoJSON[S]) Encode(st S) ([]byte, error) { return protojson.Marshal(st) }

// Decode is a Config.DecodeState.
func (p ProtoJSON[S]) Decode(line []byte) (S, error) {
	st := p.New()
	return st, protojson.Unmarshal(line, st)
}

// JSONState returns cfg with the stamp and the whole-state line of a
// state kept as one encoding/json object per line, its stamp at
// *stamp(st): Applied, SetApplied, EncodeState and DecodeState.
func JSONState[T, O, R any](cfg Config[*T, O, R], stamp func(st *T) *uint64) Config[*T, O, R] {
	cfg.Applied = func(st *T) uint64 { return *stamp(st) }
	cfg.SetApplied = func(st *T, i uint64) { *stamp(st) = i }
	cfg.EncodeState = func(st *T) ([]byte, error) { return json.Marshal(st) }
	cfg.DecodeState = DecodeJSON[T]
	return cfg
}
