package config

import (
	"strings"
	"testing"
)

func TestRedactURL(t *testing.T) {
	tests := []struct {
		in, want string
	}{
		// URLs.
		{"postgres://u:secret@h/db", "postgres://u:xxxxx@h/db"},
		{"postgresql://u:secret@h:5432/db?sslmode=disable", "postgresql://u:xxxxx@h:5432/db?sslmode=disable"},
		{"postgres://u@h/db", "postgres://u@h/db"},
		{"postgres://h/db", "postgres://h/db"},
		{"postgres:///db?host=/run/postgresql", "postgres:///db?host=/run/postgresql"},
		{"postgres://:secret@h/db", "postgres://:xxxxx@h/db"},
		{"postgres://u:@h/db", "postgres://u:xxxxx@h/db"},
		{"postgres://u:p%40ss%2Fw@h/db", "postgres://u:xxxxx@h/db"},
		{"postgres://u:p@ss@h/db", "postgres://u:xxxxx@h/db"},
		{"postgres://u:secret@h1:5432,h2:5433/db", "postgres://u:xxxxx@h1:5432,h2:5433/db"},
		{"postgres://u@h/db?password=secret&sslmode=require", "postgres://u@h/db?password=xxxxx&sslmode=require"},
		{"postgres://u@h/db?sslmode=require&sslpassword=secret", "postgres://u@h/db?sslmode=require&sslpassword=xxxxx"},
		{"postgres://u@h/db?a=1;password=secret", "postgres://u@h/db?a=1;password=xxxxx"},
		{"postgres://u@h/db?PASSWORD=secret", "postgres://u@h/db?PASSWORD=xxxxx"},
		{"postgres://u@h/db?password=", "postgres://u@h/db?password="},
		// Keyword/value strings.
		{"password=secret host=h", "password=xxxxx host=h"},
		{"host=h password=secret", "host=h password=xxxxx"},
		{"host=h  password = secret  dbname=db", "host=h  password = xxxxx  dbname=db"},
		{"host=h password='a secret' dbname=db", "host=h password='xxxxx' dbname=db"},
		{`host=h password='it\'s' dbname=db`, "host=h password='xxxxx' dbname=db"},
		{"password='secret'host=h", "password='xxxxx'host=h"},
		{`host=h password=a\ b dbname=db`, "host=h password=xxxxx dbname=db"},
		{"host=h sslpassword=s password=p", "host=h sslpassword=xxxxx password=xxxxx"},
		{"password= host=h", "password= xxxxx"}, // libpq: the value is "host=h"
		{"host=h password=", "host=h password="},
		{"host=h dbname=db", "host=h dbname=db"},
		{"", ""},
		// Unparseable: never echoed.
		{"postgres://u:sec ret@h/db", unparseableURL},
		{"postgres://u:secret@h:port/db", unparseableURL},
		{"postgres://u:%zz@h/db", unparseableURL},
		{"host=h password='unterminated", unparseableURL},
		{"host=h password", unparseableURL},
		{"host=h password=trailing\\", unparseableURL},
		{"=secret", unparseableURL},
		{"secret", unparseableURL},
		{"u:secret@h/db", unparseableURL},
		{"://u:secret@h", unparseableURL},
		{"\x00\xff", unparseableURL},
	}
	for _, tt := range tests {
		if got := RedactURL(tt.in); got != tt.want {
			t.Errorf("RedactURL(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// The passwords redact finds are those it hides, in both spellings.
func TestRedactFindsSecrets(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"postgres://u:p%40ss@h/db", []string{"p@ss", "p%40ss"}},
		{"postgres://u@h/db?password=a%20b", []string{"a%20b", "a b"}},
		{"host=h password='it\\'s'", []string{"it's", `'it\'s'`}},
		{"host=h", nil},
	}
	for _, tt := range tests {
		_, got, ok := redact(tt.in)
		if !ok || strings.Join(got, "|") != strings.Join(tt.want, "|") {
			t.Errorf("redact(%q) secrets = %q (ok %v), want %q", tt.in, got, ok, tt.want)
		}
	}
}

// FuzzRedactURL checks that RedactURL never panics, never echoes input it
// cannot parse, and leaves no password but "xxxxx" in what it returns.
func FuzzRedactURL(f *testing.F) {
	for _, s := range []string{
		"postgres://u:secret@h/db",
		"postgres://u@h/db?password=secret",
		"password=secret host=h",
		"host=h password='a b'",
		"postgres://u:p@ss@h/db",
		`password='\`,
		"://",
		"=",
		"A://:00000000@\x900000000",
		"A://#pAssword=0",
		"pAssword=''0=",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out := RedactURL(s)
		if _, _, ok := redact(s); !ok {
			if out != unparseableURL {
				t.Fatalf("RedactURL(%q) = %q for unparseable input", s, out)
			}
			return
		}
		_, left, ok := redact(out)
		if !ok || hasScheme(out) != hasScheme(s) {
			return // out is no longer the same kind of string: a "scheme:#x=y" URL, say
		}
		for _, secret := range left {
			if secret != mask && secret != "'"+mask+"'" && secret != "" {
				t.Fatalf("RedactURL(%q) = %q still has the password %q", s, out, secret)
			}
		}
	})
}
