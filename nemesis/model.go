package nemesis

import (
	"fmt"

	"github.com/anishathalye/porcupine"
)

// gpuState is one GPU as the lease model sees it: who holds it and the
// highest fencing token ever granted on it. The model is per GPU because a
// lease is exclusive per GPU and tokens only have to grow on each GPU (they
// grow per node, which implies it).
type gpuState struct {
	// Holder is the lease id holding the GPU (a gang reservation counts),
	// "" when it is free.
	Holder string
	// Last is the token of the last lease granted on the GPU.
	Last uint64
}

func (s gpuState) String() string {
	if s.Holder == "" {
		return fmt.Sprintf("free (last token %d)", s.Last)
	}
	return fmt.Sprintf("held by %s (token %d)", s.Holder, s.Last)
}

// step is what one operation does to or asks of a GPU.
type step uint8

const (
	// stepAcquire: lease ID with Token takes the GPU; it must be free and
	// Token above every token granted on it before.
	stepAcquire step = iota
	// stepRelease: lease ID gives the GPU up; it must hold it.
	stepRelease
	// stepHeld: lease ID holds the GPU (an extend was granted, the node
	// wrote an update of the lease).
	stepHeld
	// stepNotHeld: lease ID does not hold the GPU (its node answered "no
	// such lease").
	stepNotHeld
	// stepRead: the GPU's node answered that ID holds it ("" free).
	stepRead
)

func (k step) String() string {
	switch k {
	case stepAcquire:
		return "acquire"
	case stepRelease:
		return "release"
	case stepHeld:
		return "held"
	case stepNotHeld:
		return "not-held"
	default:
		return "read"
	}
}

// mutates reports whether the step changes the state (the others only
// assert something about it).
func (k step) mutates() bool { return k == stepAcquire || k == stepRelease }

// modelInput is one operation's input to the model.
type modelInput struct {
	Step  step
	ID    string
	Token uint64
}

func (in modelInput) String() string {
	switch in.Step {
	case stepAcquire:
		return fmt.Sprintf("acquire %s (token %d)", in.ID, in.Token)
	case stepRead:
		if in.ID == "" {
			return "read: free"
		}
		return "read: " + in.ID
	default:
		return in.Step.String() + " " + in.ID
	}
}

// apply is the model's sequential specification: whether in may happen in
// state s, and the state after it.
func apply(s gpuState, in modelInput) (bool, gpuState) {
	switch in.Step {
	case stepAcquire:
		if s.Holder != "" || in.Token <= s.Last {
			return false, s
		}
		return true, gpuState{Holder: in.ID, Last: in.Token}
	case stepRelease:
		if s.Holder != in.ID {
			return false, s
		}
		return true, gpuState{Last: s.Last}
	case stepHeld:
		return s.Holder == in.ID, s
	case stepNotHeld:
		return s.Holder != in.ID, s
	default:
		return s.Holder == in.ID, s
	}
}

// why says, in words, why in cannot happen in state s ("" when it can).
func why(s gpuState, in modelInput) string {
	if ok, _ := apply(s, in); ok {
		return ""
	}
	switch in.Step {
	case stepAcquire:
		if s.Holder != "" {
			return fmt.Sprintf("%s was granted while %s held it", in.ID, s.Holder)
		}
		return fmt.Sprintf("%s has token %d, not above token %d granted before", in.ID, in.Token, s.Last)
	case stepRelease:
		if s.Holder == "" {
			return fmt.Sprintf("%s ended but it did not hold it (free)", in.ID)
		}
		return fmt.Sprintf("%s ended but %s held it", in.ID, s.Holder)
	case stepHeld:
		if s.Holder == "" {
			return fmt.Sprintf("%s was used (extended or updated) while it did not hold it (free)", in.ID)
		}
		return fmt.Sprintf("%s was used (extended or updated) while %s held it", in.ID, s.Holder)
	case stepNotHeld:
		return fmt.Sprintf("its node said there is no lease %s while it held it", in.ID)
	default:
		seen := in.ID
		if seen == "" {
			seen = "it free"
		}
		if s.Holder == "" {
			return fmt.Sprintf("a read saw %s, but it was free", seen)
		}
		return fmt.Sprintf("a read saw %s, but %s held it", seen, s.Holder)
	}
}

// gpuModel is the porcupine model of one GPU, starting from init (a chunk
// of a long history starts where the one before it ended).
func gpuModel(init gpuState) porcupine.Model {
	return porcupine.Model{
		Init: func() any { return init },
		Step: func(state, input, _ any) (bool, any) {
			return apply(state.(gpuState), input.(modelInput))
		},
		Hash: func(state any) uint64 {
			s := state.(gpuState)
			h := uint64(14695981039346656037) // FNV-1a
			for i := 0; i < len(s.Holder); i++ {
				h = (h ^ uint64(s.Holder[i])) * 1099511628211
			}
			return h ^ s.Last*0x9e3779b97f4a7c15
		},
		DescribeOperation: func(input, _ any) string { return input.(modelInput).String() },
		DescribeState:     func(state any) string { return state.(gpuState).String() },
	}
}
