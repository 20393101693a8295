package config

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/pelletier/go-toml/v2"
)

// fieldByKey returns the exported field of struct type t whose toml key is
// key: its tag name, or its lower-cased Go name when it has no tag. An exact
// match wins over a case-insensitive one, as in go-toml.
func fieldByKey(t reflect.Type, key string) (reflect.StructField, bool) {
	var folded reflect.StructField
	foundFolded := false
	for i := range t.NumField() {
		f := t.Field(i)
		name, ok := tomlName(f)
		if !ok {
			continue
		}
		if name == key {
			return f, true
		}
		if !foundFolded && strings.EqualFold(name, key) {
			folded, foundFolded = f, true
		}
	}
	return folded, foundFolded
}

// tomlName returns the key of a struct field, and false for fields go-toml
// ignores (unexported, or tagged "-").
func tomlName(f reflect.StructField) (string, bool) {
	if !f.IsExported() {
		return "", false
	}
	name, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
	switch name {
	case "-":
		return "", false
	case "":
		return strings.ToLower(f.Name), true
	}
	return name, true
}

// typeAt returns the Go type found at a key path below t, entering
// structs, maps, pointers and (for arrays of tables) slices.
func typeAt(t reflect.Type, key []string) (reflect.Type, bool) {
	for _, part := range key {
		t = containerType(t)
		switch t.Kind() {
		case reflect.Struct:
			f, ok := fieldByKey(t, part)
			if !ok {
				return nil, false
			}
			t = f.Type
		case reflect.Map:
			t = t.Elem()
		default:
			return nil, false
		}
	}
	return t, true
}

// containerType strips pointers, and slices of tables, from t.
func containerType(t reflect.Type) reflect.Type {
	for {
		switch {
		case t.Kind() == reflect.Pointer:
			t = t.Elem()
		case t.Kind() == reflect.Slice && isTableType(t.Elem()):
			t = t.Elem()
		default:
			return t
		}
	}
}

func isTableType(t reflect.Type) bool {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t.Kind() == reflect.Struct || t.Kind() == reflect.Map
}

// valueAt returns the value at a key path of a document decoded into
// map[string]any; inside an array of tables it follows the last table.
func valueAt(doc map[string]any, key []string) (any, bool) {
	var cur any = doc
	for _, part := range key {
		if list, ok := cur.([]any); ok && len(list) > 0 {
			cur = list[len(list)-1]
		}
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = m[part]; !ok {
			return nil, false
		}
	}
	return cur, true
}

// describeType names a Go type the way a configuration user thinks of it:
// "an integer", "a list of strings", "a table".
func describeType(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Pointer:
		return describeType(t.Elem())
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "an integer"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a non-negative integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "a list of " + pluralType(t.Elem())
	case reflect.Map, reflect.Struct:
		return "a table"
	}
	return "a value of type " + t.String()
}

// pluralType names many values of type t: "integers", "strings".
func pluralType(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Pointer:
		return pluralType(t.Elem())
	case reflect.String:
		return "strings"
	case reflect.Bool:
		return "booleans"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "integers"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "non-negative integers"
	case reflect.Float32, reflect.Float64:
		return "numbers"
	case reflect.Slice, reflect.Array:
		return "lists"
	case reflect.Map, reflect.Struct:
		return "tables"
	}
	return "values of type " + t.String()
}

// describeValue names the TOML type of a decoded value.
func describeValue(v any) string {
	switch v.(type) {
	case string:
		return "a string"
	case int64:
		return "an integer"
	case float64:
		return "a float"
	case bool:
		return "a boolean"
	case []any:
		return "a list"
	case map[string]any:
		return "a table"
	case toml.LocalDate:
		return "a date"
	case toml.LocalTime:
		return "a time"
	case toml.LocalDateTime, time.Time:
		return "a date-time"
	}
	return fmt.Sprintf("a %T", v)
}

// fits reports whether a decoded TOML value can be stored in type t.
func fits(t reflect.Type, v any) bool {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		_, ok := v.(string)
		return ok
	case reflect.Bool:
		_, ok := v.(bool)
		return ok
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		_, ok := v.(int64)
		return ok
	case reflect.Float32, reflect.Float64:
		switch v.(type) {
		case int64, float64:
			return true
		}
		return false
	case reflect.Slice, reflect.Array:
		_, ok := v.([]any)
		return ok
	case reflect.Map, reflect.Struct:
		_, ok := v.(map[string]any)
		return ok
	}
	return true
}

// mismatch describes why the decoded value v does not fit type t: what was
// expected and what was found. For a list it names the first element that
// does not fit.
func mismatch(t reflect.Type, v any) (expected, got string) {
	expected, got = describeType(t), describeValue(v)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if list, ok := v.([]any); ok && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
		for _, item := range list {
			if !fits(t.Elem(), item) {
				return expected, "a list containing " + describeValue(item)
			}
		}
	}
	return expected, got
}

// formatKey writes a key path as TOML would: parts joined by dots, parts
// that are not bare keys quoted.
func formatKey(key []string) string {
	var b strings.Builder
	for i, part := range key {
		if i > 0 {
			b.WriteByte('.')
		}
		if isBareKey(part) {
			b.WriteString(part)
		} else {
			b.WriteString(strconv.Quote(part))
		}
	}
	return b.String()
}

func isBareKey(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range []byte(s) {
		if !('A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}
