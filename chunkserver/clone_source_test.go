package chunkserver

import (
	"testing"

	"github.com/chunkraft/chunkraft/copyset"
)

func TestParseLocation(t *testing.T) {
	tests := []struct {
		in   string
		want cloneLocation
		bad  bool
	}{
		{in: "1/3/9:0@cs", want: cloneLocation{group: copyset.NewGroupID(1, 3), chunk: 9}},
		{in: "2/16/77:8192@cs", want: cloneLocation{group: copyset.NewGroupID(2, 16), chunk: 77, offset: 8192}},
		{in: "vol/chunk-1@s3", want: cloneLocation{s3: true, object: "vol/chunk-1"}},
		{in: "a@b@s3", want: cloneLocation{s3: true, object: "a@b"}},
		{in: "", bad: true},
		{in: "1/3/9:0", bad: true},
		{in: "1/3/9:0@nfs", bad: true},
		{in: "1/3:0@cs", bad: true},
		{in: "1/3/9:100@cs", bad: true},
		{in: "1/3/9:16777216@cs", bad: true},
		{in: "x/3/9:0@cs", bad: true},
		{in: "1/3/9@cs", bad: true},
		{in: "../etc@s3", bad: true},
		{in: "@s3", bad: true},
	}
	for _, tt := range tests {
		got, err := parseLocation(tt.in)
		if tt.bad {
			if err == nil {
				t.Errorf("parseLocation(%q) = %+v, want error", tt.in, got)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("parseLocation(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
		}
	}
}
