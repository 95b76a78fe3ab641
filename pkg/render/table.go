package render

import (
	"bytes"
	"io"

	"github.com/olekukonko/tablewriter"
	"github.com/olekukonko/tablewriter/renderer"
	"github.com/olekukonko/tablewriter/tw"
)

// WriteTable prints a kubectl-style table: upper-case headers, columns
// separated by three spaces, no borders. Colour and truncation are the
// caller's, decided by TTY; every cell is cleaned of terminal control
// characters here (the palette's colours are kept), so no broker text can
// break a line or drive the terminal.
func WriteTable(w io.Writer, header []string, rows [][]string) error {
	var buf bytes.Buffer
	t := tablewriter.NewTable(&buf,
		tablewriter.WithRenderer(renderer.NewBlueprint(tw.Rendition{
			Borders: tw.BorderNone,
			Symbols: tw.NewSymbols(tw.StyleNone),
			Settings: tw.Settings{
				Separators: tw.Separators{BetweenRows: tw.Off, BetweenColumns: tw.Off, ShowHeader: tw.Off},
				Lines:      tw.Lines{ShowHeaderLine: tw.Off, ShowFooterLine: tw.Off, ShowTop: tw.Off, ShowBottom: tw.Off},
			},
		})),
		tablewriter.WithConfig(tablewriter.Config{
			Header: tw.CellConfig{
				Formatting: tw.CellFormatting{AutoFormat: tw.Off, AutoWrap: tw.WrapNone},
				Alignment:  tw.CellAlignment{Global: tw.AlignLeft},
				Padding:    tw.CellPadding{Global: tw.Padding{Left: "", Right: "   ", Overwrite: true}},
			},
			Row: tw.CellConfig{
				Formatting: tw.CellFormatting{AutoWrap: tw.WrapNone},
				Alignment:  tw.CellAlignment{Global: tw.AlignLeft},
				Padding:    tw.CellPadding{Global: tw.Padding{Left: "", Right: "   ", Overwrite: true}},
			},
		}),
		tablewriter.WithTrimSpace(tw.Off),
	)
	t.Header(header)
	for _, r := range rows {
		clean := make([]string, len(r))
		for i, c := range r {
			clean[i] = CleanKeepColour(c)
		}
		if err := t.Append(clean); err != nil {
			return err
		}
	}
	if err := t.Render(); err != nil {
		return err
	}
	// The last column's padding would leave trailing blanks on every line.
	for _, line := range bytes.SplitAfter(buf.Bytes(), []byte("\n")) {
		end := bytes.HasSuffix(line, []byte("\n"))
		line = bytes.TrimRight(line, " \n")
		if len(line) == 0 && !end {
			continue
		}
		if _, err := w.Write(append(line, '\n')); err != nil {
			return err
		}
	}
	return nil
}
