package compiler

import (
	"bytes"
	"errors"
	"io"
	"math"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// maxNodes bounds how many values one YAML document may expand to, aliases
// included, so a "billion laughs" document is an error rather than an outage.
const maxNodes = 1 << 16

// yamlDoc is one document of a YAML file.
type yamlDoc struct {
	root *value // nil for an empty document
	line int
	col  int
}

var yaml11Octal = regexp.MustCompile(`^[-+]?0[0-9_]+$`)

var yamlErrLine = regexp.MustCompile(`^(?:yaml: )?line (\d+): (.*)$`)

// indentHints are the parser's words for a line indented wrong, with where
// to look: over-indented, the line named; under-indented, the parser names
// where the mapping or list it broke starts.
var indentHints = map[string]string{
	"mapping values are not allowed in this context":         "check the indent of this line",
	"block sequence entries are not allowed in this context": "check the indent of this line",
	"did not find expected key":                              "check the indent of the lines of the mapping that starts here",
	"did not find expected '-' indicator":                    "check the indent of the lines of the list that starts here",
}

// parseYAML splits a (multi-document) YAML file into value trees. Duplicate
// keys, merge keys and runaway aliases are errors.
func parseYAML(file string, data []byte) ([]yamlDoc, Errors) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var docs []yamlDoc
	var errs Errors
	for {
		var n yaml.Node
		err := dec.Decode(&n)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			errs = append(errs, yamlError(file, data, err))
			break // the decoder cannot resynchronise after a syntax error
		}
		d := yamlDoc{line: n.Line, col: n.Column}
		if len(n.Content) > 0 && !(n.Content[0].Kind == yaml.ScalarNode && n.Content[0].ShortTag() == "!!null") {
			budget := maxNodes
			c := &converter{file: file, budget: &budget}
			d.root = c.convert(n.Content[0], 0)
			errs = append(errs, c.errs...)
		}
		if d.line == 0 {
			d.line, d.col = 1, 1
		}
		docs = append(docs, d)
	}
	return docs, errs
}

func yamlError(file string, data []byte, err error) *Error {
	msg := err.Error()
	var te *yaml.TypeError
	if errors.As(err, &te) && len(te.Errors) > 0 {
		msg = te.Errors[0]
	}
	if m := yamlErrLine.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		// The parser blames the line; find the tab it tripped on.
		if text := lineOf(data, line); strings.Contains(m[2], "cannot start any token") {
			indent := len(text) - len(strings.TrimLeft(text, " \t"))
			if i := strings.IndexByte(text[:indent], '\t'); i >= 0 {
				return &Error{Pos: Pos{File: file, Line: line, Col: i + 1}, Msg: "yaml: tab in indentation (YAML indents with spaces)"}
			}
		}
		if hint, ok := indentHints[m[2]]; ok {
			return &Error{Pos: Pos{File: file, Line: line, Col: 1}, Msg: "yaml: bad indentation (" + m[2] + " — " + hint + ")"}
		}
		return &Error{Pos: Pos{File: file, Line: line, Col: 1}, Msg: "yaml: " + m[2]}
	}
	return &Error{Pos: Pos{File: file, Line: 1, Col: 1}, Msg: strings.TrimPrefix(msg, "yaml: ")}
}

type converter struct {
	file   string
	budget *int
	errs   Errors
}

func (c *converter) errorf(n *yaml.Node, format string, args ...any) {
	c.errs = append(c.errs, errorf(Pos{File: c.file, Line: n.Line, Col: n.Column}, "", format, args...))
}

func (c *converter) convert(n *yaml.Node, depth int) *value {
	*c.budget--
	if *c.budget < 0 {
		if *c.budget == -1 {
			c.errorf(n, "document expands to more than %d values (aliases?)", maxNodes)
		}
		return &value{line: n.Line, col: n.Column}
	}
	if depth > 100 {
		c.errorf(n, "nested more than 100 levels deep")
		return &value{line: n.Line, col: n.Column}
	}
	v := &value{line: n.Line, col: n.Column}
	switch n.Kind {
	case yaml.AliasNode:
		a := c.convert(n.Alias, depth+1)
		a.line, a.col = n.Line, n.Column
		return a
	case yaml.DocumentNode:
		if len(n.Content) == 0 {
			return v
		}
		return c.convert(n.Content[0], depth)
	case yaml.SequenceNode:
		v.kind = kList
		v.list = make([]*value, 0, len(n.Content))
		for _, e := range n.Content {
			v.list = append(v.list, c.convert(e, depth+1))
		}
	case yaml.MappingNode:
		v.kind = kMap
		seen := make(map[string]int, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, e := n.Content[i], n.Content[i+1]
			if k.Kind != yaml.ScalarNode {
				c.errorf(k, "keys must be strings")
				continue
			}
			if k.Tag == "!!merge" || (k.Value == "<<" && k.Style == 0 && k.ShortTag() == "!!merge") {
				c.errorf(k, "merge keys (<<) are not supported: write the fields out")
				continue
			}
			if first, dup := seen[k.Value]; dup {
				c.errorf(k, "duplicate key %q (first defined at line %d)", k.Value, first)
				continue
			}
			seen[k.Value] = k.Line
			v.keys = append(v.keys, k.Value)
			val := c.convert(e, depth+1)
			// Point at the key: that is where a reader looks for a field.
			val.line, val.col = k.Line, k.Column
			v.vals = append(v.vals, val)
		}
	case yaml.ScalarNode:
		c.scalar(n, v)
	}
	return v
}

func (c *converter) scalar(n *yaml.Node, v *value) {
	switch n.ShortTag() {
	case "!!null":
	case "!!bool":
		var b bool
		if err := n.Decode(&b); err != nil {
			c.errorf(n, "invalid bool %q", n.Value)
		}
		v.kind, v.b = kBool, b
	case "!!int":
		var i int64
		if err := n.Decode(&i); err != nil {
			c.errorf(n, "integer %s out of range", n.Value)
		}
		v.kind, v.i, v.raw = kInt, i, n.Value
	case "!!float":
		// As CUE reads YAML: an untagged "float" that looks like a YAML
		// 1.1 octal with an 8 or 9 in it (01289) is a string, and a float
		// written without fraction or exponent (!!float 123) is a number
		// that is also an integer.
		if n.Style&yaml.TaggedStyle == 0 && yaml11Octal.MatchString(n.Value) {
			v.kind, v.str = kString, n.Value
			return
		}
		var f float64
		if err := n.Decode(&f); err != nil {
			c.errorf(n, "invalid number %q", n.Value)
		}
		v.kind, v.f, v.raw = kFloat, f, n.Value
		if !strings.ContainsAny(n.Value, ".eEiInN") && f == math.Trunc(f) && math.Abs(f) < 1<<63 {
			v.kind, v.i = kInt, int64(f)
		}
	case "!!str", "!!timestamp":
		v.kind, v.str = kString, n.Value
	case "!!binary":
		c.errorf(n, "binary values are not supported")
	default:
		c.errorf(n, "unsupported YAML tag %s", n.Tag)
	}
}

// lineOf returns line n (from 1) of data.
func lineOf(data []byte, n int) string {
	for i := 1; i < n; i++ {
		j := bytes.IndexByte(data, '\n')
		if j < 0 {
			return ""
		}
		data = data[j+1:]
	}
	if j := bytes.IndexByte(data, '\n'); j >= 0 {
		data = data[:j]
	}
	return string(data)
}
