package cmd

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

func TestConfirm(t *testing.T) {
	for answer, want := range map[string]bool{"y\n": true, "YES\n": true, " yes ": true, "n\n": false, "\n": false, "": false, "yep\n": false} {
		var out bytes.Buffer
		got, err := confirm(strings.NewReader(answer), &out, "retry 3 failed job(s)?")
		if err != nil || got != want || out.String() != "retry 3 failed job(s)? [y/N] " {
			t.Errorf("answer %q: %v %v, prompt %q", answer, got, err, out.String())
		}
	}
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	if stdinIsTerminal(null) || stdinIsTerminal(strings.NewReader("y\n")) {
		t.Error("/dev/null or a reader taken for a terminal")
	}
}
