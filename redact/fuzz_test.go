package redact_test

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/fleet-go/fleet/redact"
)

// FuzzJSON redacts arbitrary payloads with the default fragments. It must
// not panic, must always return valid JSON, and for a valid JSON payload
// must return exactly the payload with every value under a hidden key
// (objects and arrays included) replaced by the mask.
func FuzzJSON(f *testing.F) {
	for _, seed := range []string{
		``,
		` `,
		`null`,
		`{}`,
		`[]`,
		`"password"`,
		`{"password":"hunter2"}`,
		`{"user":"ann","Password":"hunter2","nested":{"api_key":"k-123","ok":1}}`,
		`{"creds":{"secret":{"deep":["s1","s2"]}},"list":[{"token":"t"},{"x":{"AUTHORIZATION":"Bearer abc"}}]}`,
		`{"api_key":[1,2,{"password":"x"}],"n":12345678901234567890123,"f":-0.0e-10}`,
		`{"password":"a","password":"b"}`,
		`{"db_password_hash":null,"secretive":true,"tokens":false}`,
		`{"pässword":"ü","PASS\u0057ORD":"escaped key","\u0000":"nul"}`,
		"{\"password\":\"\xff\xfe\"}",
		"{\"\xff\":\"v\"}",
		`{"password":"x"} {"password":"y"}`,
		`{"a":1}garbage`,
		`{"a":`,
		`[1,2,`,
		`{'password':'single'}`,
		"\x00",
		`"\ud800"`,
		`1e999999`,
		strings.Repeat(`{"a":`, 100) + `{"password":"deep"}` + strings.Repeat(`}`, 100),
		strings.Repeat(`[`, 20000) + strings.Repeat(`]`, 20000),
	} {
		f.Add([]byte(seed))
	}
	r := redact.New(redact.DefaultFragments)
	f.Fuzz(func(t *testing.T, payload []byte) {
		in := append([]byte(nil), payload...)
		out := r.JSON(payload)
		if !json.Valid(out) {
			t.Fatalf("JSON(%q) = %q: not valid JSON", in, out)
		}
		if !bytes.Equal(payload, in) {
			t.Fatalf("JSON modified its input %q to %q", in, payload)
		}
		if !json.Valid(payload) {
			return
		}
		if len(bytes.TrimSpace(payload)) == 0 {
			return
		}
		var v any
		dec := json.NewDecoder(bytes.NewReader(payload))
		dec.UseNumber()
		if err := dec.Decode(&v); err != nil {
			// Too deep for encoding/json: JSON masks it whole.
			if string(out) != `"`+redact.Mask+`"` {
				t.Fatalf("JSON(%q) = %q; want the whole payload masked", in, out)
			}
			return
		}
		want := hide(v, redact.DefaultFragments)
		var got any
		dec = json.NewDecoder(bytes.NewReader(out))
		dec.UseNumber()
		if err := dec.Decode(&got); err != nil {
			t.Fatalf("JSON(%q) = %q: %v", in, out, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("JSON(%q) = %s\nwant %v", in, out, want)
		}
		checkHidden(t, got, redact.DefaultFragments, in, out)
	})
}

// hide is the specification of Redactor.JSON on a decoded value.
func hide(v any, fragments []string) any {
	switch t := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(t))
		for k, x := range t {
			if hidden(k, fragments) {
				m[k] = redact.Mask
			} else {
				m[k] = hide(x, fragments)
			}
		}
		return m
	case []any:
		s := make([]any, len(t))
		for i, x := range t {
			s[i] = hide(x, fragments)
		}
		return s
	default:
		return v
	}
}

func hidden(name string, fragments []string) bool {
	name = strings.ToLower(name)
	for _, f := range fragments {
		if strings.Contains(name, f) {
			return true
		}
	}
	return false
}

// checkHidden fails unless every value under a hidden key in v is the mask.
func checkHidden(t *testing.T, v any, fragments []string, in, out []byte) {
	t.Helper()
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if hidden(k, fragments) {
				if e != redact.Mask {
					t.Fatalf("JSON(%q) = %s: key %q shows %v", in, out, k, e)
				}
				continue
			}
			checkHidden(t, e, fragments, in, out)
		}
	case []any:
		for _, e := range x {
			checkHidden(t, e, fragments, in, out)
		}
	}
}

// FuzzText masks free text. It must not panic, and a value written right
// after "KEY=" or "KEY:" (or `"KEY":`), where KEY holds a hidden fragment,
// must not appear in the output unless the rest of the text holds it too.
func FuzzText(f *testing.F) {
	f.Add("", "password", "hunter2", "")
	f.Add("login failed: ", "api_key", "k_123456", " for user ann")
	f.Add(`{"user":"ann","`, `Password`, `hunter2`, `"}`)
	f.Add("header ", "Authorization", "Bearer abc.def", "")
	f.Add("dsn host=h ", "password", "'a b c'", " dbname=x")
	f.Add("url?", "token", "t0k3n", "&next=1")
	f.Add("\xff\xff\xff", "password", "leaked01", "")
	f.Add("İİİİ", "secret", "leaked02", "")
	f.Add("\u212a\u212a", "token", "leaked03", " tail")
	f.Add("token=\"unterminated ", "secret", "leaked04", "")
	f.Add("secret={\"a\":[", "api_key", "leaked05", "]}")
	f.Add("\x00", "PASSWORD", "\x00\x00\x00\x00", "\x00")
	f.Add(strings.Repeat("password", 50), "password", "leaked06", "")
	f.Add("\xff\xff\xff\xff", "password", "", "")
	r := redact.New(redact.DefaultFragments)
	f.Fuzz(func(t *testing.T, prefix, key, value, suffix string) {
		s := prefix + key + "=" + value + suffix
		out := r.Text(s)
		// The property holds for a plain hidden key and a plain value: runs
		// of name bytes, with nothing after the value to extend it.
		if !isName(key) || !hidden(key, redact.DefaultFragments) || !isName(value) || len(value) < 6 {
			return
		}
		if suffix != "" && isNameByte(suffix[0]) {
			return
		}
		if strings.Contains(prefix, value) || strings.Contains(suffix, value) || strings.Contains(key, value) {
			return
		}
		if strings.Contains(out, value) {
			t.Fatalf("Text(%q) = %q: shows the value %q of %q", s, out, value, key)
		}
	})
}

func isName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isNameByte(s[i]) {
			return false
		}
	}
	return true
}

func isNameByte(c byte) bool {
	return c == '_' || c == '-' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}
