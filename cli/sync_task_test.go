package cli

import (
	"encoding/json"
	"strings"
	"testing"
)

// A sub-task's readable info (upstream's "key=value;..." string) gives
// sync status its last update time and what the export covers; JSON names
// them in camel case (coveredIndex, coveredTime, coveredTimeMs). Unknown,
// empty and bad values are left out.
func TestSyncStatusReadsInfo(t *testing.T) {
	j := syncSubTaskJSON{Info: "lastUpdateTime=1796488200000;coveredIndex=42;coveredTime=1796488199123;progressPath=copyset 1/3 sync machine (sync/state.jsonl), leader a:1;message=x=1;y"}
	j.readInfo()
	if j.LastUpdate != "2026-12-05T16:30:00Z" || j.CoveredIndex != 42 || j.CoveredTime != "2026-12-05T16:29:59.123Z" || j.CoveredTimeMs != 1796488199123 {
		t.Fatalf("read %+v", j)
	}
	b, err := json.Marshal(j)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"coveredIndex":42`, `"coveredTime":"2026-12-05T16:29:59.123Z"`, `"coveredTimeMs":1796488199123`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("json %s lacks %s", b, want)
		}
	}

	// Before the binlog phase (and from a server that does not say):
	// nothing covered, no time.
	for _, info := range []string{"lastUpdateTime=5;coveredIndex=0;coveredTime=0;progressPath=p", "lastUpdateTime=5;progressPath=p", "coveredIndex=x;coveredTime=-4"} {
		j := syncSubTaskJSON{Info: info}
		j.readInfo()
		if j.CoveredIndex != 0 || j.CoveredTime != "" || j.CoveredTimeMs != 0 {
			t.Errorf("info %q read as %+v", info, j)
		}
		b, err := json.Marshal(j)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), `"coveredIndex":0`) || strings.Contains(string(b), `"coveredTime`) {
			t.Errorf("info %q: json %s", info, b)
		}
	}
}
