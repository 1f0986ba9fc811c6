package projection_test

import (
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"os"
	"strings"
	"testing"
)

var updateSnapshotDigest = flag.Bool("update-snapshot-digest", false, "rewrite testdata/generated-snapshot.sha256 from this build's encoding")

// A snapshot's bytes do not change from build to build (a group's members and
// targets keep their place among its fields though the maps are unexported):
// the digest of a generated state's snapshot was taken before they were.
func TestSnapshotBytesKeepTheirLayout(t *testing.T) {
	const golden = "testdata/generated-snapshot.sha256"
	_, recs := MustGeneratedLog(t, 11, 1500)
	sum := sha256.Sum256(MustEncodeState(t, MustFold(t, recs)))
	got := hex.EncodeToString(sum[:])
	if *updateSnapshotDigest {
		if err := os.WriteFile(golden, []byte(got+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if got != strings.TrimSpace(string(want)) {
		t.Errorf("snapshot digest %s, want %s: the encoding of the state changed", got, strings.TrimSpace(string(want)))
	}
}
