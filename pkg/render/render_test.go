package render

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

func TestAge(t *testing.T) {
	for d, want := range map[time.Duration]string{
		-time.Second: "0s", 45 * time.Second: "45s", 3*time.Minute + 5*time.Second: "3m5s", 12 * time.Minute: "12m",
		3*time.Hour + 12*time.Minute: "3h12m", 5 * time.Hour: "5h", 52 * time.Hour: "2d4h", 40 * 24 * time.Hour: "40d",
		(8*24 + 3) * time.Hour: "8d3h", (8*24 + 18) * time.Hour: "8d18h", (400*24 + 1) * time.Hour: "400d1h",
	} {
		if got := Age(d); got != want {
			t.Errorf("Age(%s) = %s, want %s", d, got, want)
		}
	}
}

func TestTableAndTruncate(t *testing.T) {
	var b bytes.Buffer
	WriteTable(&b, []string{"AGE", "QUEUE"}, [][]string{{"3m", "orders"}, {"2d4h", "notifications"}})
	want := "AGE    QUEUE\n3m     orders\n2d4h   notifications\n"
	if b.String() != want {
		t.Fatalf("table:\n%q\nwant\n%q", b.String(), want)
	}
	if Truncate("order 8812 not found", 10) != "order 881…" || Truncate("short", 10) != "short" {
		t.Fatal("truncate")
	}
}

func TestStreams(t *testing.T) {
	for f, want := range map[Format]string{
		JSON:   "[\n  {\n    \"a\": 1\n  },\n  {\n    \"a\": 2\n  }\n]\n",
		NDJSON: "{\"a\":1}\n{\"a\":2}\n",
		YAML:   "- a: 1\n- a: 2\n",
	} {
		var b bytes.Buffer
		s := NewStream(&b, f)
		s.Write(map[string]int{"a": 1})
		s.Write(map[string]int{"a": 2})
		s.Close()
		if b.String() != want {
			t.Errorf("%s: %q", f, b.String())
		}
	}
	var b bytes.Buffer
	s := NewStream(&b, JSON)
	s.Close()
	if b.String() != "[]\n" {
		t.Errorf("empty json stream: %q", b.String())
	}
	if _, err := ParseFormat("xml"); err == nil || !strings.Contains(err.Error(), "table, wide, json, ndjson, yaml") {
		t.Fatal(err)
	}
}

func TestPaletteOff(t *testing.T) {
	p := NewPalette(false)
	if p.Red("x") != "x" || p.Age("1h", time.Hour*2, time.Hour) != "1h" {
		t.Fatal("colour off must leave text alone")
	}
	if on := NewPalette(true); !strings.Contains(on.Red("x"), "\x1b[") {
		t.Fatal("colour on")
	}
}

// Every character that reorders text or shows nothing is escaped, not
// only the bidi controls: format characters (soft hyphen, word joiner,
// invisible operators, the Arabic letter mark, Mongolian vowel
// separator, tags), line and paragraph separators, and the blank
// letters that render as nothing (Hangul fillers).
func TestCleanEscapesInvisibleCharacters(t *testing.T) {
	for _, r := range []rune{0x00ad, 0x034f, 0x061c, 0x115f, 0x1160, 0x180e, 0x200b, 0x200e, 0x2028, 0x2029, 0x2060, 0x2061, 0x2062,
		0x2063, 0x2064, 0x2066, 0x206f, 0x3164, 0xfeff, 0xffa0, 0xfff9, 0xe0001, 0xe0041, 0xe007f} {
		in := "a" + string(r) + "b"
		out := Clean(in)
		if out == in || !strings.HasPrefix(out, "a\\u") && !strings.HasPrefix(out, "a\\U") {
			t.Errorf("U+%04X: Clean(%q) = %q", r, in, out)
		}
	}
	for _, keep := range []string{"naïve café", "日本語", "emoji 😀", "Ελληνικά"} {
		if Clean(keep) != keep {
			t.Errorf("Clean(%q) = %q: visible text must stay", keep, Clean(keep))
		}
	}
}

// A document with a spooled list reads back as the same document with
// the list in it, in every machine format, empty or not, and the JSON is
// what Document prints with the list last.
func TestDocumentWithList(t *testing.T) {
	type head struct {
		Batch string         `json:"batchId"`
		Count int            `json:"count"`
		By    map[string]int `json:"by,omitempty"`
	}
	type item struct {
		Of     string   `json:"of"`
		Groups []string `json:"groups,omitempty"`
		Why    string   `json:"why,omitempty"`
	}
	type whole struct {
		head
		List []item `json:"list"`
	}
	for _, list := range [][]item{nil, {{Of: "a"}}, {{Of: "a", Groups: []string{"g1", "g2"}}, {Of: "b: c", Why: "line\nbreak \"quoted\""}, {Of: "d"}}} {
		var spool bytes.Buffer
		for _, it := range list {
			line, _ := json.Marshal(it)
			spool.Write(append(line, '\n'))
		}
		h := head{Batch: "b-1", Count: len(list), By: map[string]int{"orders": 2}}
		want := whole{head: h, List: list}
		if want.List == nil {
			want.List = []item{}
		}
		for _, f := range []Format{JSON, NDJSON, YAML} {
			var out bytes.Buffer
			if err := DocumentWithList(&out, f, h, "list", bytes.NewReader(spool.Bytes())); err != nil {
				t.Fatal(err)
			}
			var got whole
			raw := out.Bytes()
			if f == YAML {
				var err error
				if raw, err = yaml.YAMLToJSON(raw); err != nil {
					t.Fatalf("%s: %v\n%s", f, err, out.String())
				}
			}
			if err := json.Unmarshal(raw, &got); err != nil {
				t.Fatalf("%s: %v\n%s", f, err, out.String())
			}
			if got.List == nil {
				got.List = []item{}
			}
			g, _ := json.Marshal(got)
			w, _ := json.Marshal(want)
			if !bytes.Equal(g, w) {
				t.Errorf("%s: read back\n%s\nwant\n%s\nfrom\n%s", f, g, w, out.String())
			}
			if f == NDJSON && bytes.Count(out.Bytes(), []byte("\n")) != 1 {
				t.Errorf("ndjson is one line: %q", out.String())
			}
			if f == JSON {
				var doc bytes.Buffer
				_ = Document(&doc, JSON, struct {
					head
					List []item `json:"list"`
				}{h, want.List})
				if doc.String() != out.String() {
					t.Errorf("json differs from Document's:\n%s\nwant\n%s", out.String(), doc.String())
				}
			}
		}
	}
}
