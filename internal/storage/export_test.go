package storage

// SetAfterPiece makes p call f after each piece of a batch it writes in
// pieces but the last; an error from f stops Apply there.
func SetAfterPiece(p *Pebble, f func() error) { p.afterPiece = f }
