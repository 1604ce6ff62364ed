package engine

import (
	"fmt"
	"os"
	"time"
)

var ztOn = os.Getenv("ZZ_CTRACE") != ""

type ztT struct {
	last time.Time
	s    string
}

var zt ztT

func (z *ztT) start() {
	if ztOn {
		z.last = time.Now()
		z.s = ""
	}
}
func (z *ztT) mark(n string) {
	if ztOn {
		now := time.Now()
		z.s += fmt.Sprintf(" %s=%.1f", n, float64(now.Sub(z.last).Microseconds())/1000)
		z.last = now
	}
}
func (z *ztT) end() {
	if ztOn {
		fmt.Fprintln(os.Stderr, "ZCOMMIT"+z.s)
	}
}
