package config

import (
	"reflect"

	"github.com/pelletier/go-toml/v2"
)

// MarshalChanges is cfg as TOML, keeping only the keys whose value differs
// from Default(), and no table left empty: a file that stays short, and
// to which a later release's defaults still apply. Load reads it back into
// cfg.
func MarshalChanges(cfg *Config) ([]byte, error) {
	tables := func(c *Config) (map[string]any, error) {
		b, err := toml.Marshal(c)
		if err != nil {
			return nil, err
		}
		m := map[string]any{}
		return m, toml.Unmarshal(b, &m)
	}
	def := Default()
	want, err := tables(cfg)
	if err != nil {
		return nil, err
	}
	base, err := tables(&def)
	if err != nil {
		return nil, err
	}
	pruneDefaults(want, base)
	return toml.Marshal(want)
}

// pruneDefaults deletes from m every value that base holds too, and every
// table left empty.
func pruneDefaults(m, base map[string]any) {
	for k, v := range m {
		if sub, ok := v.(map[string]any); ok {
			if bsub, ok := base[k].(map[string]any); ok {
				pruneDefaults(sub, bsub)
			}
			if len(sub) == 0 {
				delete(m, k)
			}
			continue
		}
		if bv, ok := base[k]; ok && reflect.DeepEqual(v, bv) {
			delete(m, k)
		}
	}
}
