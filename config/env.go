package config

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
)

const (
	// envPrefix starts every variable that overrides a key.
	envPrefix = "APP_"
	// envSep separates the levels of a key in a variable name.
	envSep = "__"
	// envConfig names the configuration file; it is not a key override.
	envConfig = "APP_CONFIG"
	// envEnv names the deployment environment (production, staging, ...)
	// for other tools; it is not a key override.
	envEnv = "APP_ENV"
)

// reservedVar reports whether name is one of the APP_ variables that are
// not key overrides: APP_CONFIG and APP_ENV.
func reservedVar(name string) bool {
	switch name {
	case envConfig, envEnv:
		return true
	}
	return false
}

// override is one APP_ variable to apply to the configuration.
type override struct {
	name  string // APP_QUEUE__WORKERS
	value string
	where string // how errors name it: "environment APP_X" or ".env:5: APP_X"
}

// parseEnviron turns "KEY=VALUE" pairs into a map; a later pair wins.
// Entries without '=' or with an empty name are ignored.
func parseEnviron(environ []string) map[string]string {
	env := make(map[string]string, len(environ))
	for _, kv := range environ {
		name, value, ok := strings.Cut(kv, "=")
		if ok && name != "" {
			env[name] = value
		}
	}
	return env
}

// overrides lists the APP_ variables to apply: those of the .env file that
// the real environment does not also set, in line order, then those of the
// real environment, by name. The reserved variables are left out.
func overrides(env map[string]string, dotenv []dotenvVar) []override {
	var out []override
	for _, v := range dotenv {
		if _, shadowed := env[v.name]; shadowed || !isOverride(v.name) {
			continue
		}
		out = append(out, override{name: v.name, value: v.value, where: dotenvWhere(v)})
	}
	for _, name := range slices.Sorted(maps.Keys(env)) {
		if isOverride(name) {
			out = append(out, override{name: name, value: env[name], where: "environment " + name})
		}
	}
	return out
}

// isOverride reports whether the variable name overrides a key: an APP_
// variable, not a reserved one, whose first part (up to the first "__")
// names one of the configuration's sections (database, queue, log,
// fleet). Any other APP_ variable (APP_SECRET_KEY, APP_DEBUG) belongs to
// the application and is left alone; a misspelt key inside a section
// (APP_QUEUE__WORKRS) is still an error.
func isOverride(name string) bool {
	if !strings.HasPrefix(name, envPrefix) || reservedVar(name) {
		return false
	}
	section, _, _ := strings.Cut(strings.TrimPrefix(name, envPrefix), envSep)
	_, ok := fieldByKey(reflect.TypeFor[Config](), strings.ToLower(section))
	return ok
}

// applyOverrides sets each variable's key in cfg. It applies every variable
// it can and reports all that failed. Values echoed in errors have secrets
// (database passwords) masked.
func applyOverrides(cfg *Config, vars []override, secrets []string) error {
	root := reflect.ValueOf(cfg).Elem()
	var errs []error
	for _, o := range vars {
		if err := applyOverride(root, o, secrets); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func applyOverride(root reflect.Value, o override, secrets []string) error {
	path, err := envKeyPath(o.name)
	if err != nil {
		return &sourceError{where: o.where, msg: err.Error()}
	}
	err = setKey(root, path, o.value)
	if err == nil {
		return nil
	}
	key := formatKey(path)
	var ve *valueError
	var msg string
	switch {
	case errors.Is(err, unknownKey):
		msg = "unknown key " + key
	case errors.Is(err, tableKey):
		msg = fmt.Sprintf("%s is a table: set one of its keys, as in %s%s<KEY>", key, o.name, envSep)
	case errors.As(err, &ve):
		msg = fmt.Sprintf("expected %s, got %s", ve.expected, quoteValue(o.value, secrets))
	default:
		msg = err.Error()
	}
	return &sourceError{where: o.where, msg: msg, err: err}
}

// envKeyPath maps APP_X__Y__Z to the key path [x y z].
func envKeyPath(name string) ([]string, error) {
	rest := strings.TrimPrefix(name, envPrefix)
	if rest == "" {
		return nil, fmt.Errorf("malformed variable name: no key after %s", envPrefix)
	}
	parts := strings.Split(rest, envSep)
	for i, p := range parts {
		if p == "" {
			return nil, fmt.Errorf("malformed variable name: empty key part (%q separates levels)", envSep)
		}
		parts[i] = strings.ToLower(p)
	}
	return parts, nil
}

// setKey stores raw, converted to the field's type, at the key path below
// v, which must be settable. Structs are entered by their toml tags, maps
// by key (missing entries are created, nil maps allocated), pointers are
// allocated.
func setKey(v reflect.Value, path []string, raw string) error {
	if len(path) == 0 {
		return setValue(v, raw)
	}
	switch v.Kind() {
	case reflect.Struct:
		f, ok := fieldByKey(v.Type(), path[0])
		if !ok {
			return unknownKey
		}
		return setKey(v.FieldByIndex(f.Index), path[1:], raw)
	case reflect.Map:
		return setMapKey(v, path, raw)
	case reflect.Pointer:
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		return setKey(v.Elem(), path, raw)
	default:
		return unknownKey
	}
}

// setMapKey sets the key path inside the map entry path[0] of m.
func setMapKey(m reflect.Value, path []string, raw string) error {
	t := m.Type()
	if t.Key().Kind() != reflect.String {
		return unknownKey
	}
	k := reflect.ValueOf(path[0]).Convert(t.Key())
	elem := reflect.New(t.Elem()).Elem()
	if old := m.MapIndex(k); old.IsValid() {
		elem.Set(old)
	}
	if err := setKey(elem, path[1:], raw); err != nil {
		return err
	}
	if m.IsNil() {
		m.Set(reflect.MakeMap(t))
	}
	m.SetMapIndex(k, elem)
	return nil
}

// setValue converts raw to v's type and stores it. Lists are
// comma-separated, with spaces around items trimmed; the empty string is an
// empty list. Booleans are true, false, 1 or 0.
func setValue(v reflect.Value, raw string) error {
	t := v.Type()
	switch t.Kind() {
	case reflect.Pointer:
		p := reflect.New(t.Elem())
		if err := setValue(p.Elem(), raw); err != nil {
			return err
		}
		v.Set(p)
	case reflect.String:
		v.SetString(raw)
	case reflect.Bool:
		b, err := parseBool(raw)
		if err != nil {
			return &valueError{expected: describeType(t), err: err}
		}
		v.SetBool(b)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n, err := strconv.ParseInt(strings.TrimSpace(raw), 10, t.Bits())
		if err != nil {
			return &valueError{expected: describeType(t), err: err}
		}
		v.SetInt(n)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		n, err := strconv.ParseUint(strings.TrimSpace(raw), 10, t.Bits())
		if err != nil {
			return &valueError{expected: describeType(t), err: err}
		}
		v.SetUint(n)
	case reflect.Float32, reflect.Float64:
		f, err := strconv.ParseFloat(strings.TrimSpace(raw), t.Bits())
		if err != nil {
			return &valueError{expected: describeType(t), err: err}
		}
		v.SetFloat(f)
	case reflect.Slice:
		return setList(v, raw)
	case reflect.Map, reflect.Struct:
		return tableKey
	default:
		return fmt.Errorf("cannot set a value of type %s from the environment", t)
	}
	return nil
}

// setList sets the slice v from a comma-separated list.
func setList(v reflect.Value, raw string) error {
	var items []string
	if strings.TrimSpace(raw) != "" {
		items = strings.Split(raw, ",")
	}
	list := reflect.MakeSlice(v.Type(), len(items), len(items))
	for i, item := range items {
		if err := setValue(list.Index(i), strings.TrimSpace(item)); err != nil {
			var ve *valueError
			if errors.As(err, &ve) {
				return &valueError{expected: describeType(v.Type()), err: err}
			}
			return err
		}
	}
	v.Set(list)
	return nil
}

// parseBool accepts true, false (in any case), 1 and 0.
func parseBool(s string) (bool, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "true", "1":
		return true, nil
	case "false", "0":
		return false, nil
	}
	return false, fmt.Errorf("invalid boolean %q", s)
}

// quoteValue quotes a value for an error message, cut when it is long,
// masking what could be a database password: a connection string is
// redacted, and every known secret is replaced.
func quoteValue(v string, secrets []string) shown {
	if hasScheme(v) || isPasswordKey(v) {
		v = RedactURL(v)
	}
	for _, s := range secrets {
		if s != "" {
			v = strings.ReplaceAll(v, s, mask)
		}
	}
	if len(v) > maxValueBytes {
		return shown(fmt.Sprintf("%q", longValue(v)))
	}
	return shown(strconv.Quote(v))
}
