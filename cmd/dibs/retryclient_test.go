package main

import (
	"errors"
	"math/rand/v2"
	"time"

	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/base/poll"
)

// untilAnswered calls f until the agent answers it (a grant, or a refusal
// as *api.Error) or within has passed, every 10 ms, as a real client
// retries with the same request id while its agent is down or its answer
// was lost. It returns f's last error and how many calls it made. The
// durability drill and the power-cut test share it.
func untilAnswered(within time.Duration, f func() error) (tries int, err error) {
	poll.WaitEvery(10*time.Millisecond, within, func() bool {
		tries++
		var ae *api.Error
		err = f()
		return err == nil || errors.As(err, &ae)
	})
	return tries, err
}

// agentLife lets the agent live 50–400 ms of real time under its clients'
// load before the next kill or power cut: long enough for the clients to
// work in earnest, short enough that the cut lands anywhere.
func agentLife(rng *rand.Rand) {
	time.Sleep(time.Duration(50+rng.IntN(350)) * time.Millisecond) // load window: the agent lives a random real while under the clients' load
}
