package location

import "testing"

func TestParse(t *testing.T) {
	tests := []struct {
		in   string
		want Location
		bad  bool
	}{
		{in: "1/3/9:0@cs", want: Location{Kind: CS, Pool: 1, Copyset: 3, Chunk: 9}},
		{in: "2/16/77:8192@cs", want: Location{Kind: CS, Pool: 2, Copyset: 16, Chunk: 77, Offset: 8192}},
		{in: "vol/chunk-1@s3", want: Location{Kind: S3, Object: "vol/chunk-1"}},
		{in: "a@b@s3", want: Location{Kind: S3, Object: "a@b"}},
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
		got, err := Parse(tt.in)
		if tt.bad {
			if err == nil {
				t.Errorf("Parse(%q) = %+v, want error", tt.in, got)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("Parse(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
		}
		if got.String() != tt.in {
			t.Errorf("String() = %q, want %q", got.String(), tt.in)
		}
	}
}
