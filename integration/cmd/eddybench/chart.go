package main

import (
	"fmt"
	"html"
	"strings"
)

// chart draws a run as an SVG: for each workload and guarantee, eddy's and
// Kafka Streams' records/s (left) and peak memory (right) as bars, each
// pair to its own scale (word count counts lines, the others records),
// with eddy's ratio to Kafka Streams written beside each pair.
func chart(rows []row) string {
	type pair struct {
		label            string
		eddyRate, ksRate float64
		eddyRSS, ksRSS   float64
	}
	var ps []pair
	for _, r := range rows {
		e, eok := r.res["eddy"]
		k, kok := r.res["kstreams"]
		if !eok || !kok || !e.ok || !k.ok {
			continue
		}
		g := "at-least-once"
		if r.guarantee == "exactly_once" {
			g = "exactly-once"
		}
		ps = append(ps, pair{r.workload + ", " + g, e.rate, k.rate, e.maxRSS, k.maxRSS})
	}
	const (
		labelW, barW, gap, rowH, barH, top = 190.0, 300.0, 150.0, 46.0, 16.0, 56.0
	)
	width := labelW + 2*barW + gap + 110
	height := top + float64(len(ps))*rowH + 40
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-family="sans-serif" font-size="12">`+"\n", width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%.0f" y="20" font-size="14" font-weight="bold">records/s (higher is better; each row to its own scale)</text>`+"\n", labelW)
	fmt.Fprintf(&b, `<text x="%.0f" y="20" font-size="14" font-weight="bold">peak memory, MiB (lower is better)</text>`+"\n", labelW+barW+gap)
	legend := func(x float64, color, name string) {
		fmt.Fprintf(&b, `<rect x="%.0f" y="30" width="12" height="12" fill="%s"/><text x="%.0f" y="40">%s</text>`+"\n", x, color, x+16, name)
	}
	legend(labelW, "#2b6cb0", "eddy")
	legend(labelW+70, "#a0aec0", "Kafka Streams")
	for i, p := range ps {
		y := top + float64(i)*rowH
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" text-anchor="end">%s</text>`+"\n", labelW-8, y+barH+4, html.EscapeString(p.label))
		bars := func(x0, e, k, maxV float64, format string, ratio float64) {
			we, wk := barW*e/maxV, barW*k/maxV
			fmt.Fprintf(&b, `<rect x="%.0f" y="%.0f" width="%.1f" height="%.0f" fill="#2b6cb0"/>`, x0, y, we, barH)
			fmt.Fprintf(&b, `<text x="%.1f" y="%.0f" font-size="10">%s</text>`+"\n", x0+we+4, y+12, fmt.Sprintf(format, e))
			fmt.Fprintf(&b, `<rect x="%.0f" y="%.0f" width="%.1f" height="%.0f" fill="#a0aec0"/>`, x0, y+barH+2, wk, barH)
			fmt.Fprintf(&b, `<text x="%.1f" y="%.0f" font-size="10">%s</text>`+"\n", x0+wk+4, y+barH+14, fmt.Sprintf(format, k))
			fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" font-weight="bold">%.2f×</text>`+"\n", x0+barW+50, y+barH+4, ratio)
		}
		bars(labelW, p.eddyRate, p.ksRate, max(p.eddyRate, p.ksRate), "%.0f", p.eddyRate/p.ksRate)
		bars(labelW+barW+gap, p.eddyRSS, p.ksRSS, max(p.eddyRSS, p.ksRSS), "%.0f", p.eddyRSS/p.ksRSS)
	}
	b.WriteString("</svg>\n")
	return b.String()
}
