package grpcbuf

import (
	"bytes"

	"google.golang.org/grpc/mem"
)

// wasteMax bounds, as a fraction of the message, the unused capacity of a
// received buffer that Hold lets aliasing fields keep alive.
const wasteMax = 4 // 1/4

// Hold returns a received message (a codec's Unmarshal input) as one slice
// whose bytes are never overwritten, so that decoded bytes fields may alias
// it for as long as they live instead of being copied out of it:
//
//   - A message that gRPC delivered in one buffer (it fitted in one HTTP/2
//     frame) is used in place when that buffer is not much larger than the
//     message: Hold takes a reference of its own, returned as ref, which the
//     caller must never free while anything aliases the bytes (and may free
//     at once if nothing ended up aliasing them). gRPC frees only its own
//     reference when Unmarshal returns, so the buffer never goes back to
//     Pool and is never reused; the GC reclaims it once nothing points into
//     it.
//   - Otherwise (a message spanning frames, or one in a buffer that class
//     rounding made much larger: a 4.1 KiB message in an 8 KiB buffer) the
//     bytes are copied once into a new allocation of exactly the message's
//     size, not zeroed first and owned by the GC alone (ref is nil). Not
//     data.MaterializeToBuffer(Pool): kept forever, a pooled buffer would
//     never be reused, and the aliasing fields would pin its whole class
//     capacity.
//
// Either way the copy protobuf-go's Unmarshal makes of every bytes field is
// gone: a message spanning frames is copied once instead of twice, a message
// in one frame not at all or once.
func Hold(data mem.BufferSlice) (b []byte, ref mem.Buffer) {
	if d, ok := fits(data); ok {
		data[0].Ref()
		return d, data[0]
	}
	var small [128][]byte // a 1 MiB entry spans 65 frames of 16 KiB
	parts := small[:0]
	for _, buf := range data {
		parts = append(parts, buf.ReadOnlyData())
	}
	// bytes.Join allocates exactly the total length without zeroing it.
	return bytes.Join(parts, nil), nil
}

// Borrow is Hold for a message whose aliasing fields live only until the
// caller calls release (once; the bytes must not be used after it): a
// message in one well-fitting buffer is used in place under a reference of
// Borrow's own, which release frees; any other is copied into a buffer of
// Pool, which release puts back. Either way the memory is reused by a later
// message instead of being a fresh allocation the kernel must fault in and
// zero.
func Borrow(data mem.BufferSlice) (b []byte, release func()) {
	if d, ok := fits(data); ok {
		buf := data[0]
		buf.Ref()
		return d, buf.Free
	}
	bp := Pool.Get(data.Len())
	data.CopyTo(*bp)
	return *bp, func() { Pool.Put(bp) }
}

// fits returns the bytes of a message gRPC delivered in one buffer not much
// larger than it (at most 1/wasteMax unused), which may be used in place.
func fits(data mem.BufferSlice) ([]byte, bool) {
	if len(data) != 1 {
		return nil, false
	}
	d := data[0].ReadOnlyData()
	return d, cap(d)-len(d) <= len(d)/wasteMax
}
