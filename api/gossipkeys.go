package api

import (
	"context"
	"crypto/sha256"
	"encoding/hex"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/l4xg/grid/api/gridpb"
	"github.com/l4xg/grid/cluster/topology"
)

// Keyring is what GossipKeys needs of the cluster runtime
// (*cluster.Runtime).
type Keyring interface {
	GossipKeyring(action string, key []byte) ([][]byte, error)
}

// KeyFingerprint names a gossip key without revealing it: the first 8
// bytes of its SHA-256, in hex.
func KeyFingerprint(key []byte) string {
	h := sha256.Sum256(key)
	return hex.EncodeToString(h[:8])
}

// GossipKeys lists or changes this node's gossip keyring.
func (s *Server) GossipKeys(_ context.Context, req *gridpb.GossipKeysRequest) (*gridpb.GossipKeysResponse, error) {
	if s.opts.Keyring == nil {
		return nil, status.Error(codes.FailedPrecondition, "gossip encryption is off on this node (--gossip-key-file)")
	}
	action := map[gridpb.GossipKeyAction]string{
		gridpb.GossipKeyAction_GOSSIP_KEY_LIST:    topology.KeyringList,
		gridpb.GossipKeyAction_GOSSIP_KEY_INSTALL: topology.KeyringInstall,
		gridpb.GossipKeyAction_GOSSIP_KEY_USE:     topology.KeyringUse,
		gridpb.GossipKeyAction_GOSSIP_KEY_REMOVE:  topology.KeyringRemove,
	}[req.GetAction()]
	if action == "" {
		return nil, status.Errorf(codes.InvalidArgument, "gossip key action %v: list, install, use or remove", req.GetAction())
	}
	if action != topology.KeyringList {
		if n := len(req.GetKey()); n != 16 && n != 24 && n != 32 {
			return nil, status.Errorf(codes.InvalidArgument, "a gossip key is 16, 24 or 32 bytes, not %d", n)
		}
	}
	keys, err := s.opts.Keyring.GossipKeyring(action, req.GetKey())
	if err != nil {
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	}
	resp := &gridpb.GossipKeysResponse{}
	if s.opts.Cluster != nil {
		resp.NodeId = string(s.opts.Cluster.Self())
	}
	for _, k := range keys {
		resp.Fingerprints = append(resp.Fingerprints, KeyFingerprint(k))
	}
	return resp, nil
}
