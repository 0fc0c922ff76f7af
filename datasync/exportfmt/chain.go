package exportfmt

import (
	"fmt"
)

// GapError is the error of a chain whose packets do not meet: the packet
// Next starts at NextStart, not where packet Prev ends (PrevEnd).
type GapError struct {
	Prev, Next         string
	PrevEnd, NextStart Point
}

func (e *GapError) Error() string {
	if e.NextStart.Compare(e.PrevEnd) < 0 {
		return fmt.Sprintf("overlap: packet %s starts at %v, before %s ends (%v)", e.Next, e.NextStart, e.Prev, e.PrevEnd)
	}
	return fmt.Sprintf("gap: packet %s ends at %v but the next packet %s starts at %v", e.Prev, e.PrevEnd, e.Next, e.NextStart)
}

// BadPacketError is the error of a packet that is not valid where it is.
type BadPacketError struct {
	Name string
	Err  error
}

func (e *BadPacketError) Error() string { return fmt.Sprintf("bad packet %s: %v", e.Name, e.Err) }

func (e *BadPacketError) Unwrap() error { return e.Err }

// Chain checks that the packets of one copyset, given in name order, form
// an unbroken chain of points: every name is the packet name of its start
// point in this copyset, names are strictly increasing, and each packet
// starts where the previous one ends. The first packet may start anywhere
// (a kIncrementalByTimestamp export starts at a binlog point); Start
// reports where. Packets added with AddPacket must also be of one export
// (the same export_id; an empty id, an export written before ids, goes
// only with empty ids). The zero Chain is not usable: use NewChain.
type Chain struct {
	pool, copyset uint32
	n             int
	first, next   Point
	last          string
	// exportID is the export of the packets added with AddPacket, from
	// the first of them, firstName; byPacket says there was one.
	exportID, firstName string
	byPacket            bool
}

// NewChain returns a checker for the packets of copyset (pool, copyset).
func NewChain(pool, copyset uint32) *Chain { return &Chain{pool: pool, copyset: copyset} }

// Add checks the next packet of the chain, named name, covering
// [start, next). The error is a *BadPacketError or a *GapError; after an
// error the chain is unchanged.
func (c *Chain) Add(name string, start, next Point) error {
	p, cs, at, err := ParsePacketName(name)
	if err != nil {
		return &BadPacketError{Name: name, Err: err}
	}
	switch {
	case p != c.pool || cs != c.copyset:
		return &BadPacketError{Name: name, Err: fmt.Errorf("it belongs to copyset %d/%d, not %d/%d", p, cs, c.pool, c.copyset)}
	case at != start:
		return &BadPacketError{Name: name, Err: fmt.Errorf("its name says it starts at %v, its header %v", at, start)}
	case next.Compare(start) < 0:
		return &BadPacketError{Name: name, Err: fmt.Errorf("it ends (%v) before it starts (%v)", next, start)}
	case c.n > 0 && name <= c.last:
		return &BadPacketError{Name: name, Err: fmt.Errorf("out of name order: it follows %s", c.last)}
	case c.n > 0 && start != c.next:
		return &GapError{Prev: c.last, Next: name, PrevEnd: c.next, NextStart: start}
	}
	if c.n == 0 {
		c.first = start
	}
	c.n++
	c.next = next
	c.last = name
	return nil
}

// AddPacket is Add for a decoded packet; it also checks the copyset in
// the packet's header and that the packet is of the export of the packets
// added before it (their export_id).
func (c *Chain) AddPacket(name string, p *Packet) error {
	if p.Header.LogicPoolId != c.pool || p.Header.CopysetId != c.copyset {
		return &BadPacketError{Name: name, Err: fmt.Errorf("its header names copyset %d/%d, not %d/%d",
			p.Header.LogicPoolId, p.Header.CopysetId, c.pool, c.copyset)}
	}
	id := p.Header.GetExportId()
	if c.byPacket && id != c.exportID {
		return &BadPacketError{Name: name, Err: fmt.Errorf("it is of export %s, the packets before it (from %s on) of export %s: the copyset holds packets of two exports",
			ExportIDString(id), c.firstName, ExportIDString(c.exportID))}
	}
	if err := c.Add(name, p.Start, p.Next); err != nil {
		return err
	}
	if !c.byPacket {
		c.exportID, c.firstName, c.byPacket = id, name, true
	}
	return nil
}

// ExportID returns the export of the packets added with AddPacket ("" for
// none, or packets written before export ids).
func (c *Chain) ExportID() string { return c.exportID }

// ExportIDString is export id id for messages: the id, or "(none)" for
// the empty id of an export written before export ids.
func ExportIDString(id string) string {
	if id == "" {
		return "(none)"
	}
	return id
}

// Len returns the number of packets added.
func (c *Chain) Len() int { return c.n }

// Start returns where the chain starts; ok is false when it is empty.
func (c *Chain) Start() (p Point, ok bool) { return c.first, c.n > 0 }

// Next returns where the chain ends, the next point to export; ok is false
// when it is empty.
func (c *Chain) Next() (p Point, ok bool) { return c.next, c.n > 0 }

// Last returns the name of the last packet added ("" when empty).
func (c *Chain) Last() string { return c.last }
