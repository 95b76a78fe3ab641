package inspect

// ReadHoldsAfter makes a read ask for the holds in force after n
// addresses looked up one by one; the returned func restores the default.
func ReadHoldsAfter(n int) (restore func()) {
	was := holdsAfter
	holdsAfter = n
	return func() { holdsAfter = was }
}

// Looked is how many addresses the read looked up one by one.
func (d *Decisions) Looked() int {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.looked
}

// HoldsRead says whether the read asked for the holds in force.
func (d *Decisions) HoldsRead() bool {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.holdsRead
}
