package config

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"

	"github.com/pelletier/go-toml/v2"
)

// DefaultPath is where Load looks for the configuration file, relative to
// Options.Dir, when neither Options.Path nor APP_CONFIG names one. Unlike a
// named file, it may be absent.
const DefaultPath = "config/app.toml"

// Options says where configuration comes from. Zero values mean: Path "" ->
// use Environ's APP_CONFIG if set (or else the .env file's APP_CONFIG), else
// DefaultPath relative to Dir; Dir "" -> os.Getwd(); Environ nil ->
// os.Environ(). A non-nil empty Environ is an empty environment.
type Options struct {
	Path    string   // explicit --config PATH; a missing explicit file is an error
	Dir     string   // working directory; .env and the default config path are relative to it
	Environ []string // "KEY=VALUE" pairs
}

// Load builds the configuration from, in increasing precedence: Default(),
// the TOML file, the .env file in Options.Dir, and the environment. It then
// calls Validate.
//
// The TOML file is Options.Path, else the file named by APP_CONFIG, else
// DefaultPath; relative paths are relative to Options.Dir. A named file
// must exist; DefaultPath may be absent. Keys the Config struct does not
// have are errors.
//
// Every variable APP_X__Y__Z overrides the key x.y.z ("__" separates
// levels, names are lower-cased), e.g. APP_QUEUE__WORKERS=8 or
// APP_FLEET__SUPERVISORS__DEFAULT__MAX_PROCESSES=16 (map entries are
// created as needed). Lists are comma-separated; booleans are true, false,
// 1 or 0. An APP_ variable that names no key is an error, except APP_CONFIG
// (the configuration file) and APP_ENV (the deployment environment, for
// other tools). A variable of the .env file is ignored when the environment
// also sets it.
//
// Errors name their source and, where there is one, the line:
// "config/app.toml:4: queue.workers: expected an integer, got a string",
// ".env:3: malformed line: unterminated quoted value",
// "environment APP_QUEUE__WORKRS: unknown key queue.workrs". When a source
// has several errors they are joined (errors.Join), one per line. No error
// shows the database password.
func Load(opts Options) (*Config, error) {
	dir, err := workDir(opts.Dir)
	if err != nil {
		return nil, err
	}
	environ := opts.Environ
	if environ == nil {
		environ = os.Environ()
	}
	env := parseEnviron(environ)
	dotenv, err := readDotenv(filepath.Join(dir, dotenvName))
	if err != nil {
		return nil, err
	}

	cfg := Default()
	if err := loadFile(&cfg, locateFile(opts.Path, dir, env, dotenv)); err != nil {
		return nil, err
	}
	vars := overrides(env, dotenv)
	if err := applyOverrides(&cfg, vars, secrets(&cfg, vars)); err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &cfg, nil
}

// workDir returns dir, or the process's working directory if dir is empty.
func workDir(dir string) (string, error) {
	if dir != "" {
		return dir, nil
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("config: working directory: %w", err)
	}
	return wd, nil
}

// configFile is the TOML file to read.
type configFile struct {
	path     string // to open
	display  string // as errors show it: the path as given
	origin   string // how it was chosen, for "does not exist" errors
	optional bool   // whether it may be absent
}

// locateFile chooses the TOML file: the explicit path, else APP_CONFIG from
// the environment, else APP_CONFIG from the .env file, else DefaultPath.
func locateFile(explicit, dir string, env map[string]string, dotenv []dotenvVar) configFile {
	if explicit != "" {
		return configFile{path: inDir(dir, explicit), display: explicit}
	}
	if p := env[envConfig]; p != "" {
		return configFile{path: inDir(dir, p), display: p, origin: " (named by " + envConfig + ")"}
	}
	if p, _ := lookupDotenv(dotenv, envConfig); p != "" {
		return configFile{path: inDir(dir, p), display: p, origin: " (named by " + dotenvName + " " + envConfig + ")"}
	}
	return configFile{path: inDir(dir, filepath.FromSlash(DefaultPath)), display: DefaultPath, optional: true}
}

// inDir resolves a relative path against dir.
func inDir(dir, path string) string {
	if filepath.IsAbs(path) {
		return path
	}
	return filepath.Join(dir, path)
}

// loadFile decodes the TOML file f over cfg.
func loadFile(cfg *Config, f configFile) error {
	data, err := os.ReadFile(f.path)
	switch {
	case errors.Is(err, fs.ErrNotExist) && f.optional:
		return nil
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("config file %s%s: %w", f.display, f.origin, fs.ErrNotExist)
	case err != nil:
		return fmt.Errorf("config file %s: %w", f.display, err)
	}
	return decodeTOML(cfg, data, f.display)
}

// decodeTOML decodes a TOML document over cfg, rejecting unknown keys.
// Errors are "NAME:LINE: ...". The document is first decoded into a map:
// this reports syntax errors, and gives the type of a value that does not
// fit its field, which go-toml's own messages describe poorly.
func decodeTOML(cfg *Config, data []byte, name string) error {
	var doc map[string]any
	if err := toml.Unmarshal(data, &doc); err != nil {
		return tomlError(name, err, nil)
	}
	dec := toml.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(cfg); err != nil {
		return tomlError(name, err, doc)
	}
	return nil
}

// tomlError rewrites a go-toml error as "NAME:LINE: ...". With doc (the
// document as a map), a value of the wrong type is described as
// "KEY: expected TYPE, got TYPE".
func tomlError(name string, err error, doc map[string]any) error {
	var strict *toml.StrictMissingError
	if errors.As(err, &strict) {
		errs := make([]error, len(strict.Errors))
		for i := range strict.Errors {
			de := &strict.Errors[i]
			errs[i] = &sourceError{where: atLine(name, de), msg: "unknown key " + formatKey(de.Key()), err: de}
		}
		return errors.Join(errs...)
	}
	var de *toml.DecodeError
	if !errors.As(err, &de) {
		return fmt.Errorf("%s: %w", name, err)
	}
	msg := strings.TrimPrefix(de.Error(), "toml: ")
	if key := de.Key(); doc != nil && len(key) > 0 {
		msg = formatKey(key) + ": " + msg
		if expected, got, ok := describeMismatch(key, doc); ok {
			msg = fmt.Sprintf("%s: expected %s, got %s", formatKey(key), expected, got)
		}
	}
	return &sourceError{where: atLine(name, de), msg: msg, err: de}
}

// atLine returns "NAME:LINE" for a decode error.
func atLine(name string, de *toml.DecodeError) string {
	line, _ := de.Position()
	return fmt.Sprintf("%s:%d", name, line)
}

// describeMismatch says what the Config field at key expects and what the
// document holds there.
func describeMismatch(key []string, doc map[string]any) (expected, got string, ok bool) {
	t, ok := typeAt(reflect.TypeFor[Config](), key)
	if !ok {
		return "", "", false
	}
	v, ok := valueAt(doc, key)
	if !ok {
		return "", "", false
	}
	expected, got = mismatch(t, v)
	return expected, got, expected != got
}

// secrets returns the database passwords found in the configured URLs
// (database.url and database.direct_url) and in the variables that
// override them, to be masked in error messages.
func secrets(cfg *Config, vars []override) []string {
	out := cfg.secrets()
	for _, v := range vars {
		path, err := envKeyPath(v.name)
		if err != nil {
			continue
		}
		if k := formatKey(path); k == "database.url" || k == "database.direct_url" {
			_, found, _ := redact(v.value)
			out = append(out, found...)
		}
	}
	return out
}
