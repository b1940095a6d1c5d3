package sqs_test

import (
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeSQS is an SQS endpoint speaking the JSON protocol the SDK uses
// (POST /, X-Amz-Target: AmazonSQS.<Action>, application/x-amz-json-1.0),
// for the actions Consume makes and the tests need: SendMessage,
// ReceiveMessage (long polling, visibility timeouts, receive counts),
// DeleteMessageBatch and ChangeMessageVisibility. Only a message's latest
// receipt handle is valid, as in SQS. Queues are the URL's last segment.
type fakeSQS struct {
	srv *httptest.Server

	mu      sync.Mutex
	queues  map[string][]*fakeMsg
	deleted map[string]int
	seq     int
	changed chan struct{}
}

type fakeMsg struct {
	ID        string
	Body      string
	Attrs     map[string]attrValue
	visibleAt time.Time
	receipt   string
	receives  int
}

type attrValue struct {
	DataType    string
	StringValue string `json:",omitempty"`
}

func newFakeSQS(t *testing.T) *fakeSQS {
	f := &fakeSQS{queues: map[string][]*fakeMsg{}, deleted: map[string]int{}, changed: make(chan struct{})}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeSQS) url(queue string) string { return f.srv.URL + "/000000000000/" + queue }

func queueName(url string) string { return url[strings.LastIndexByte(url, '/')+1:] }

func (f *fakeSQS) notify() {
	close(f.changed)
	f.changed = make(chan struct{})
}

func (f *fakeSQS) serve(w http.ResponseWriter, r *http.Request) {
	action, ok := strings.CutPrefix(r.Header.Get("X-Amz-Target"), "AmazonSQS.")
	if r.Method != http.MethodPost || !ok || !strings.HasPrefix(r.Header.Get("Content-Type"), "application/x-amz-json-1.0") {
		sqsError(w, "InvalidAction", "not an SQS JSON request")
		return
	}
	var in map[string]json.RawMessage
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		sqsError(w, "MalformedInput", err.Error())
		return
	}
	str := func(k string) string {
		var s string
		_ = json.Unmarshal(in[k], &s)
		return s
	}
	num := func(k string, def int) int {
		n := def
		_ = json.Unmarshal(in[k], &n)
		return n
	}
	queue := queueName(str("QueueUrl"))
	var out any
	switch action {
	case "SendMessage":
		attrs := map[string]attrValue{}
		_ = json.Unmarshal(in["MessageAttributes"], &attrs)
		out = f.send(queue, str("MessageBody"), attrs)
	case "ReceiveMessage":
		out = f.receive(r, queue, num("MaxNumberOfMessages", 1), num("WaitTimeSeconds", 0), num("VisibilityTimeout", 30))
	case "DeleteMessageBatch":
		var entries []struct{ Id, ReceiptHandle string }
		_ = json.Unmarshal(in["Entries"], &entries)
		out = f.deleteBatch(queue, entries)
	case "ChangeMessageVisibility":
		if !f.changeVisibility(queue, str("ReceiptHandle"), num("VisibilityTimeout", 0)) {
			sqsError(w, "ReceiptHandleIsInvalid", "the receipt handle is not the message's latest")
			return
		}
		out = struct{}{}
	default:
		sqsError(w, "InvalidAction", "the fake does not do "+action)
		return
	}
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	_ = json.NewEncoder(w).Encode(out)
}

func sqsError(w http.ResponseWriter, code, msg string) {
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	w.WriteHeader(http.StatusBadRequest)
	_ = json.NewEncoder(w).Encode(map[string]string{"__type": "com.amazonaws.sqs#" + code, "message": msg})
}

func md5hex(s string) string { h := md5.Sum([]byte(s)); return hex.EncodeToString(h[:]) }

func (f *fakeSQS) send(queue, body string, attrs map[string]attrValue) any {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seq++
	id := fmt.Sprintf("msg-%d", f.seq)
	f.queues[queue] = append(f.queues[queue], &fakeMsg{ID: id, Body: body, Attrs: attrs})
	f.notify()
	return map[string]string{"MessageId": id, "MD5OfMessageBody": md5hex(body)}
}

func (f *fakeSQS) receive(r *http.Request, queue string, max, waitSecs, visSecs int) any {
	deadline := time.Now().Add(time.Duration(waitSecs) * time.Second)
	for {
		f.mu.Lock()
		now := time.Now()
		var msgs []map[string]any
		next := deadline
		for _, m := range f.queues[queue] {
			if len(msgs) == max {
				break
			}
			if now.Before(m.visibleAt) {
				if m.visibleAt.Before(next) {
					next = m.visibleAt
				}
				continue
			}
			f.seq++
			m.receipt, m.receives, m.visibleAt = fmt.Sprintf("rh-%d", f.seq), m.receives+1, now.Add(time.Duration(visSecs)*time.Second)
			msgs = append(msgs, map[string]any{
				"MessageId": m.ID, "ReceiptHandle": m.receipt, "Body": m.Body, "MD5OfBody": md5hex(m.Body),
				"Attributes":        map[string]string{"ApproximateReceiveCount": fmt.Sprint(m.receives)},
				"MessageAttributes": m.Attrs,
			})
		}
		changed := f.changed
		f.mu.Unlock()
		if len(msgs) > 0 || !time.Now().Before(deadline) {
			return map[string]any{"Messages": msgs}
		}
		select {
		case <-r.Context().Done():
			return map[string]any{"Messages": msgs}
		case <-changed:
		case <-time.After(time.Until(next)): // a message becomes visible, or the wait ends
		}
	}
}

// latest finds the message whose latest receipt handle is rh; the caller
// holds mu.
func (f *fakeSQS) latest(queue, rh string) int {
	for i, m := range f.queues[queue] {
		if m.receipt == rh {
			return i
		}
	}
	return -1
}

func (f *fakeSQS) deleteBatch(queue string, entries []struct{ Id, ReceiptHandle string }) any {
	f.mu.Lock()
	defer f.mu.Unlock()
	ok, failed := []map[string]string{}, []map[string]any{}
	for _, e := range entries {
		i := f.latest(queue, e.ReceiptHandle)
		if i < 0 {
			failed = append(failed, map[string]any{"Id": e.Id, "Code": "ReceiptHandleIsInvalid", "Message": "stale receipt handle", "SenderFault": true})
			continue
		}
		f.queues[queue] = append(f.queues[queue][:i], f.queues[queue][i+1:]...)
		f.deleted[queue]++
		ok = append(ok, map[string]string{"Id": e.Id})
	}
	f.notify()
	return map[string]any{"Successful": ok, "Failed": failed}
}

func (f *fakeSQS) changeVisibility(queue, rh string, secs int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	i := f.latest(queue, rh)
	if i < 0 {
		return false
	}
	f.queues[queue][i].visibleAt = time.Now().Add(time.Duration(secs) * time.Second)
	f.notify()
	return true
}

// depth is how many messages queue holds, visible or not.
func (f *fakeSQS) depth(queue string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.queues[queue])
}

// messages returns a copy of queue's messages.
func (f *fakeSQS) messages(queue string) []fakeMsg {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []fakeMsg
	for _, m := range f.queues[queue] {
		out = append(out, *m)
	}
	return out
}
