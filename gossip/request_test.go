package gossip

import "testing"

// TestPendingMatchesByIDAndNode: a response reaches the request waiting for
// it only when it comes from the node the request went to, and only once;
// a request no longer waited for (timed out, its caller gone) takes none.
func TestPendingMatchesByIDAndNode(t *testing.T) {
	var p pending
	id1, ch1 := p.add("node02")
	id2, _ := p.add("node03")
	if id1 == id2 || id1 == 0 || id2 == 0 {
		t.Fatalf("ids %d and %d: want two distinct non-zero ids", id1, id2)
	}
	if r := p.take(&responseMsg{ID: id1, From: "node03"}); r != nil {
		t.Fatal("a response from another node than the request's was taken")
	}
	r := p.take(&responseMsg{ID: id1, From: "node02"})
	if r == nil {
		t.Fatal("the response of node02 to its request was not taken")
	}
	if r.ch != ch1 {
		t.Error("the response was matched to another request's channel")
	}
	if p.take(&responseMsg{ID: id1, From: "node02"}) != nil {
		t.Error("a second response to one request was taken")
	}
	p.drop(id2)
	if p.take(&responseMsg{ID: id2, From: "node03"}) != nil {
		t.Error("a response to a request no longer waited for was taken")
	}
}
