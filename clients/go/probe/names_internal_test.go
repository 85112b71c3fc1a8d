package probe

import "testing"

// The runtime's symbols read as Go source spells them (docs/probes.md).
func TestReadableFunc(t *testing.T) {
	for _, c := range []struct{ symbol, module, name string }{
		{"main.main", "main", "main"},
		{"main.(*T).m", "main", "T.m"},
		{"main.T.m", "main", "T.m"},
		{"main.main.func1", "main", "main.func1"},
		{"main.(*T).m.func2.1", "main", "T.m.func2.1"},
		{"main.F[...]", "main", "F"},
		{"main.(*List[...]).Push", "main", "List.Push"},
		{"example.com/app/store.(*DB).Get", "example.com/app/store", "store.DB.Get"},
		{"example.com/app/store.Open", "example.com/app/store", "store.Open"},
		{"gopkg.in/yaml%2ev3.(*decoder).unmarshal", "gopkg.in/yaml.v3", "yaml.v3.decoder.unmarshal"},
		{"net/http.(*Server).Serve", "net/http", "http.Server.Serve"},
		{"strings.Cut", "strings", "strings.Cut"},
	} {
		module, name := readableFunc(c.symbol)
		if module != c.module || name != c.name {
			t.Errorf("%s: (%q, %q), want (%q, %q)", c.symbol, module, name, c.module, c.name)
		}
	}
}

// An injected object is a JSON merge patch over the value (RFC 7386).
func TestMergePatch(t *testing.T) {
	type inner struct {
		A int `json:"a"`
		B int `json:"b"`
	}
	type args struct {
		Cmd   string            `json:"cmd"`
		N     int               `json:"n"`
		Env   map[string]string `json:"env"`
		Inner inner             `json:"inner"`
	}
	value := args{Cmd: "ls", N: 2, Env: map[string]string{"A": "1", "B": "2"}, Inner: inner{1, 2}}
	for _, c := range []struct {
		patch any
		want  string
	}{
		{map[string]any{"cmd": "pwd"}, `{"cmd":"pwd","env":{"A":"1","B":"2"},"inner":{"a":1,"b":2},"n":2}`},
		{map[string]any{"inner": map[string]any{"b": 5.0}, "env": map[string]any{"A": nil}}, `{"cmd":"ls","env":{"B":"2"},"inner":{"a":1,"b":5},"n":2}`},
		{map[string]any{"n": nil}, `{"cmd":"ls","env":{"A":"1","B":"2"},"inner":{"a":1,"b":2}}`},
		{[]any{1.0}, `[1]`},
		{"x", `"x"`},
	} {
		got, err := mergePatch(value, c.patch)
		if err != nil || string(got) != c.want {
			t.Errorf("%v: %s %v, want %s", c.patch, got, err, c.want)
		}
	}
}
