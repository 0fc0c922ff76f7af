package exportfmt

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/chunkraft/chunkraft/proto/chunkraft/syncpb"
)

// Decoding a body without its data (Verify). The body's wire format is
// walked field by field; each record's kind message is unmarshalled from a
// copy of its fields without the data field, which is only checked to be
// well-formed. The result is what proto.Unmarshal gives, less the data:
// the same refusals of malformed input, the same records otherwise.

// Field numbers of the body and records (proto/chunkraft/syncpb).
const (
	bodyRecordsField     = 1
	recordSnapshotField  = 1
	recordCowField       = 2
	recordBinlogField    = 3
	snapshotDataField    = 5
	cowSnapshotDataField = 4
	binlogDataField      = 5
)

var errMalformed = errors.New("malformed protobuf")

// dataFieldOf is the data field of a record kind's message.
func dataFieldOf(kind protowire.Number) protowire.Number {
	switch kind {
	case recordSnapshotField:
		return snapshotDataField
	case recordCowField:
		return cowSnapshotDataField
	}
	return binlogDataField
}

// recordsStripped decodes body's records without their data; has[i] says
// whether record i had data. With alias, each record's data is set after
// all, aliasing body (a proto.Unmarshal copies it).
func recordsStripped(body []byte, alias bool) (records []*syncpb.Record, has []bool, err error) {
	for len(body) > 0 {
		num, typ, n := protowire.ConsumeTag(body)
		if n < 0 {
			return nil, nil, fmt.Errorf("%w: %v", errMalformed, protowire.ParseError(n))
		}
		body = body[n:]
		if num != bodyRecordsField || typ != protowire.BytesType {
			m := protowire.ConsumeFieldValue(num, typ, body)
			if m < 0 {
				return nil, nil, fmt.Errorf("%w: %v", errMalformed, protowire.ParseError(m))
			}
			body = body[m:] // an unknown field, as proto.Unmarshal keeps it
			continue
		}
		v, m := protowire.ConsumeBytes(body)
		if m < 0 {
			return nil, nil, fmt.Errorf("%w: %v", errMalformed, protowire.ParseError(m))
		}
		body = body[m:]
		r, d, err := recordStripped(v, alias)
		if err != nil {
			return nil, nil, fmt.Errorf("record %d: %w", len(records), err)
		}
		records, has = append(records, r), append(has, d)
	}
	return records, has, nil
}

// recordStripped decodes one Record without its kind's data field (with
// alias: with its data field aliasing b). As in proto.Unmarshal, the last
// kind on the wire wins, the fields of a kind repeated on the wire merge,
// and the last data on the wire is the data.
func recordStripped(b []byte, alias bool) (*syncpb.Record, bool, error) {
	var (
		kind    protowire.Number
		fields  []byte // the kind's fields less its data, in wire order
		unknown []byte // the record's other fields, kept as proto.Unmarshal keeps them
		data    []byte // the last data seen, aliasing b
	)
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, false, fmt.Errorf("%w: %v", errMalformed, protowire.ParseError(n))
		}
		if (num != recordSnapshotField && num != recordCowField && num != recordBinlogField) || typ != protowire.BytesType {
			m := protowire.ConsumeFieldValue(num, typ, b[n:])
			if m < 0 {
				return nil, false, fmt.Errorf("%w: %v", errMalformed, protowire.ParseError(m))
			}
			unknown = append(unknown, b[:n+m]...)
			b = b[n+m:]
			continue
		}
		b = b[n:]
		v, m := protowire.ConsumeBytes(b)
		if m < 0 {
			return nil, false, fmt.Errorf("%w: %v", errMalformed, protowire.ParseError(m))
		}
		b = b[m:]
		if num != kind { // another kind replaces the one before
			kind, fields, data = num, nil, nil
		}
		var err error
		if fields, data, err = stripField(fields, v, dataFieldOf(num), data); err != nil {
			return nil, false, err
		}
	}
	r := &syncpb.Record{}
	if len(unknown) > 0 {
		r.ProtoReflect().SetUnknown(unknown)
	}
	var msg proto.Message
	switch kind {
	case 0:
		return r, false, nil
	case recordSnapshotField:
		k := &syncpb.SnapshotRecord{}
		r.Kind, msg = &syncpb.Record_Snapshot{Snapshot: k}, k
	case recordCowField:
		k := &syncpb.CowSnapshotRecord{}
		r.Kind, msg = &syncpb.Record_CowSnapshot{CowSnapshot: k}, k
	default:
		k := &syncpb.BinlogRecord{}
		r.Kind, msg = &syncpb.Record_Binlog{Binlog: k}, k
	}
	// As a Body's unmarshal does for its nested records (it does not
	// check the op's proto2 required fields), partial is allowed.
	if err := (proto.UnmarshalOptions{AllowPartial: true}).Unmarshal(fields, msg); err != nil {
		return nil, false, err
	}
	if alias && len(data) > 0 {
		switch k := msg.(type) {
		case *syncpb.SnapshotRecord:
			k.Data = data
		case *syncpb.CowSnapshotRecord:
			k.Data = data
		case *syncpb.BinlogRecord:
			k.Data = data
		}
	}
	return r, len(data) > 0, nil
}

// stripField appends to out the fields of message b other than field
// data (bytes), checking that field's wire format; it returns the last
// data seen (the last occurrence wins: last is the one seen before b; the
// result aliases b or last).
func stripField(out, b []byte, data protowire.Number, last []byte) ([]byte, []byte, error) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, nil, fmt.Errorf("%w: %v", errMalformed, protowire.ParseError(n))
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			return nil, nil, fmt.Errorf("%w: %v", errMalformed, protowire.ParseError(m))
		}
		if num == data && typ == protowire.BytesType {
			v, _ := protowire.ConsumeBytes(b[n:])
			last = v
		} else {
			out = append(out, b[:n+m]...)
		}
		b = b[n+m:]
	}
	return out, last, nil
}
