package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"

	"go.yaml.in/yaml/v3"
)

// applyConfigFile sets, from a YAML file of `flag-name: value` lines, every
// flag that neither the command line nor a BOOTOPS_* variable set: flags
// win over the environment, which wins over the file.
func applyConfigFile(fs *flag.FlagSet, file string) error {
	data, err := os.ReadFile(file)
	if err != nil {
		return usagef("--config: %v", err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return usagef("%s: %v", file, err)
	}
	if len(doc.Content) == 0 {
		return nil // an empty file
	}
	m := doc.Content[0]
	if m.Kind != yaml.MappingNode {
		return usagef("%s:%d:%d: want a mapping of setting: value", file, m.Line, m.Column)
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var errs []error
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		f := fs.Lookup(k.Value)
		if f == nil || k.Value == "config" {
			msg := fmt.Sprintf("%s:%d:%d: unknown setting %q", file, k.Line, k.Column, k.Value)
			if s := closestFlag(fs, k.Value); s != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", s)
			}
			errs = append(errs, errors.New(msg))
			continue
		}
		if set[k.Value] {
			continue
		}
		var val string
		switch v.Kind {
		case yaml.ScalarNode:
			val = v.Value
		case yaml.SequenceNode:
			var items []string
			for _, it := range v.Content {
				items = append(items, it.Value)
			}
			val = strings.Join(items, ",")
		default:
			errs = append(errs, fmt.Errorf("%s:%d:%d: %s: want a value or a list", file, v.Line, v.Column, k.Value))
			continue
		}
		if err := fs.Set(k.Value, val); err != nil {
			errs = append(errs, fmt.Errorf("%s:%d:%d: %s: invalid value %q (%v)", file, v.Line, v.Column, k.Value, val, err))
		}
	}
	if len(errs) > 0 {
		return usageError{errors.Join(errs...).Error()}
	}
	return nil
}

// closestFlag suggests a flag name one or two edits away.
func closestFlag(fs *flag.FlagSet, name string) string {
	best, bestD := "", 3
	fs.VisitAll(func(f *flag.Flag) {
		if d := editDistance(name, f.Name); d < bestD {
			best, bestD = f.Name, d
		}
	})
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}
