package runrecord

import "fmt"

// errf is an error about figures that came from outside.
func errf(format string, args ...any) error {
	return fmt.Errorf("run figures: "+format, args...)
}
