package shard

import (
	"errors"
	"io/fs"
	"path/filepath"
	"strconv"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/l4xg/grid/keyspace"
)

// hostCollector reports per-shard gauges at scrape time.
type hostCollector struct {
	h          *Host
	keys       *prometheus.Desc
	bytes      *prometheus.Desc
	applied    *prometheus.Desc
	isLeader   *prometheus.Desc
	demotions  *prometheus.Desc
	evictions  *prometheus.Desc
	purges     *prometheus.Desc
	lookups    *prometheus.Desc
	hits       *prometheus.Desc
	latency    *prometheus.Desc
	coldDisk   *prometheus.Desc
	coldHealth *prometheus.Desc
	coldStalls *prometheus.Desc
	coldErrors *prometheus.Desc
	bloom      *prometheus.Desc
	restores   *prometheus.Desc
	// The Raft log store's writes and fsyncs (raftlog.WriteStats).
	logWrites, logEntries, logWriteTime, fsyncs, fsyncTime *prometheus.Desc
	voters, diskFree, diskSize, dirSize                    *prometheus.Desc
}

func newHostCollector(h *Host) *hostCollector {
	return &hostCollector{
		h:          h,
		keys:       prometheus.NewDesc("l4xg_grid_keys", "Records held, by shard, tier and state.", []string{"shard", "tier", "state"}, nil),
		bytes:      prometheus.NewDesc("l4xg_grid_tier_bytes", "Bytes held by the record slots of a tier, by shard.", []string{"shard", "tier"}, nil),
		applied:    prometheus.NewDesc("l4xg_grid_raft_applied_index", "Last Raft index applied, by shard.", []string{"shard"}, nil),
		isLeader:   prometheus.NewDesc("l4xg_grid_shard_leader", "1 when the local replica leads the shard.", []string{"shard"}, nil),
		demotions:  prometheus.NewDesc("l4xg_grid_demotions_total", "Records moved from the hot to the cold tier, by shard.", []string{"shard"}, nil),
		evictions:  prometheus.NewDesc("l4xg_grid_budget_evictions_total", "Demotions made early because the hot tier was over its budget, by shard.", []string{"shard"}, nil),
		purges:     prometheus.NewDesc("l4xg_grid_purges_total", "Cold records removed at their retention end, by shard.", []string{"shard"}, nil),
		lookups:    prometheus.NewDesc("l4xg_grid_cold_lookups_total", "Lookups that reached the cold tier, by shard.", []string{"shard"}, nil),
		hits:       prometheus.NewDesc("l4xg_grid_cold_hits_total", "Cold tier lookups that found a record, by shard.", []string{"shard"}, nil),
		latency:    prometheus.NewDesc("l4xg_grid_cold_lookup_seconds", "Latency of cold tier lookups, by shard.", []string{"shard"}, nil),
		coldDisk:   prometheus.NewDesc("l4xg_grid_cold_disk_bytes", "Bytes on disk of the node's cold tier.", nil, nil),
		coldHealth: prometheus.NewDesc("l4xg_grid_cold_write_failing", "1 while a cold tier write keeps failing (applies wait for it).", nil, nil),
		coldStalls: prometheus.NewDesc("l4xg_grid_cold_write_stalls_total", "Write stalls of the cold tier's Pebble.", nil, nil),
		coldErrors: prometheus.NewDesc("l4xg_grid_cold_background_errors_total", "Failed flushes and compactions of the cold tier.", nil, nil),
		bloom:      prometheus.NewDesc("l4xg_grid_cold_bloom_probes_total", "Bloom filter probes of cold lookups, by result.", []string{"result"}, nil),
		restores:   prometheus.NewDesc("l4xg_grid_cold_restores_total", "Cold tier restores from a snapshot, by shard and source: local sstable files, or the snapshot stream.", []string{"shard", "source"}, nil),

		logWrites:    prometheus.NewDesc("l4xg_grid_raft_log_writes_total", "Synced writes of Raft log entries (one per StoreLogs of any shard).", nil, nil),
		logEntries:   prometheus.NewDesc("l4xg_grid_raft_log_entries_written_total", "Raft log entries written.", nil, nil),
		logWriteTime: prometheus.NewDesc("l4xg_grid_raft_log_write_seconds_total", "Time spent in Raft log writes, until synced.", nil, nil),
		fsyncs:       prometheus.NewDesc("l4xg_grid_raft_log_fsyncs_total", "fdatasyncs of the Raft log journal; concurrent log writes of any shard share one.", nil, nil),
		fsyncTime:    prometheus.NewDesc("l4xg_grid_raft_log_fsync_seconds_total", "Time spent in fdatasyncs of the Raft log journal.", nil, nil),
		voters:       prometheus.NewDesc("l4xg_grid_shard_voters", "Voters in the shard's latest Raft configuration, exported by its leader only.", []string{"shard"}, nil),
		diskFree:     prometheus.NewDesc("l4xg_grid_data_dir_available_bytes", "Bytes available to the node on the data directory's file system.", nil, nil),
		diskSize:     prometheus.NewDesc("l4xg_grid_data_dir_fs_size_bytes", "Size of the file system holding the data directory.", nil, nil),
		dirSize:      prometheus.NewDesc("l4xg_grid_data_dir_size_bytes", "Bytes the files of the data directory take (Raft logs, snapshots, the cold tier).", nil, nil),
	}
}

func (c *hostCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.keys
	ch <- c.bytes
	ch <- c.applied
	ch <- c.isLeader
	ch <- c.demotions
	ch <- c.evictions
	ch <- c.purges
	ch <- c.lookups
	ch <- c.hits
	ch <- c.latency
	ch <- c.coldDisk
	ch <- c.coldHealth
	ch <- c.coldStalls
	ch <- c.coldErrors
	ch <- c.bloom
	ch <- c.restores
	ch <- c.logWrites
	ch <- c.logEntries
	ch <- c.logWriteTime
	ch <- c.fsyncs
	ch <- c.fsyncTime
	ch <- c.voters
	ch <- c.diskFree
	ch <- c.diskSize
	ch <- c.dirSize
}

func (c *hostCollector) Collect(ch chan<- prometheus.Metric) {
	// A replica stopped meanwhile still describes its last state.
	for _, s := range c.h.Replicas() {
		st := s.Status()
		id := strconv.FormatUint(st.ID, 10)
		for state, n := range st.Counts {
			ch <- prometheus.MustNewConstMetric(c.keys, prometheus.GaugeValue, float64(n), id, "hot", stateLabel(state))
		}
		ch <- prometheus.MustNewConstMetric(c.bytes, prometheus.GaugeValue, float64(st.HotBytes), id, "hot")
		ch <- prometheus.MustNewConstMetric(c.applied, prometheus.GaugeValue, float64(st.AppliedIndex), id)
		leader := 0.0
		if st.RaftState == "Leader" {
			leader = 1
		}
		ch <- prometheus.MustNewConstMetric(c.isLeader, prometheus.GaugeValue, leader, id)
		if leader == 1 {
			if servers, err := s.Configuration(); err == nil {
				voters := 0
				for _, srv := range servers {
					if srv.Suffrage == raft.Voter {
						voters++
					}
				}
				ch <- prometheus.MustNewConstMetric(c.voters, prometheus.GaugeValue, float64(voters), id)
			}
		}
		c.collectCold(ch, id, st)
	}
	if st, err := c.h.cold.Stats(); err == nil {
		ch <- prometheus.MustNewConstMetric(c.coldDisk, prometheus.GaugeValue, float64(st.DiskBytes))
		ch <- prometheus.MustNewConstMetric(c.coldStalls, prometheus.CounterValue, float64(st.WriteStalls))
		ch <- prometheus.MustNewConstMetric(c.coldErrors, prometheus.CounterValue, float64(st.BackgroundErrors))
		ch <- prometheus.MustNewConstMetric(c.bloom, prometheus.CounterValue, float64(st.FilterHits), "spared_read")
		ch <- prometheus.MustNewConstMetric(c.bloom, prometheus.CounterValue, float64(st.FilterMisses), "read")
	}
	failing := 0.0
	if c.h.ColdHealth() != nil {
		failing = 1
	}
	ch <- prometheus.MustNewConstMetric(c.coldHealth, prometheus.GaugeValue, failing)
	w := c.h.logs.WriteStats()
	ch <- prometheus.MustNewConstMetric(c.logWrites, prometheus.CounterValue, float64(w.Writes))
	ch <- prometheus.MustNewConstMetric(c.logEntries, prometheus.CounterValue, float64(w.Entries))
	ch <- prometheus.MustNewConstMetric(c.logWriteTime, prometheus.CounterValue, w.WriteTime.Seconds())
	ch <- prometheus.MustNewConstMetric(c.fsyncs, prometheus.CounterValue, float64(w.Fsyncs))
	ch <- prometheus.MustNewConstMetric(c.fsyncTime, prometheus.CounterValue, w.FsyncTime.Seconds())
	if free, size, err := diskSpace(c.h.cfg.DataDir); err == nil {
		ch <- prometheus.MustNewConstMetric(c.diskFree, prometheus.GaugeValue, float64(free))
		ch <- prometheus.MustNewConstMetric(c.diskSize, prometheus.GaugeValue, float64(size))
	}
	if used, err := dirSize(c.h.cfg.DataDir); err == nil {
		ch <- prometheus.MustNewConstMetric(c.dirSize, prometheus.GaugeValue, float64(used))
	}
}

// dirSize is the bytes the regular files under dir take. Files that go
// while it walks (a compaction, a snapshot reaped) are skipped.
func dirSize(dir string) (int64, error) {
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n, err
}

func (c *hostCollector) collectCold(ch chan<- prometheus.Metric, id string, st Status) {
	cs := st.Cold
	ch <- prometheus.MustNewConstMetric(c.keys, prometheus.GaugeValue, float64(cs.Keys), id, "cold", "settled")
	ch <- prometheus.MustNewConstMetric(c.bytes, prometheus.GaugeValue, float64(cs.Bytes), id, "cold")
	ch <- prometheus.MustNewConstMetric(c.demotions, prometheus.CounterValue, float64(st.Stats.Demoted), id)
	ch <- prometheus.MustNewConstMetric(c.evictions, prometheus.CounterValue, float64(st.Stats.Evicted), id)
	ch <- prometheus.MustNewConstMetric(c.purges, prometheus.CounterValue, float64(st.Stats.Purged), id)
	ch <- prometheus.MustNewConstMetric(c.lookups, prometheus.CounterValue, float64(cs.Lookups), id)
	ch <- prometheus.MustNewConstMetric(c.hits, prometheus.CounterValue, float64(cs.Hits), id)
	ch <- prometheus.MustNewConstMetric(c.restores, prometheus.CounterValue, float64(cs.FileRestores), id, "files")
	ch <- prometheus.MustNewConstMetric(c.restores, prometheus.CounterValue, float64(cs.StreamRestores), id, "stream")
	h := cs.LookupLatency
	buckets := make(map[float64]uint64, len(h.Bounds))
	var cumulative uint64
	for i, b := range h.Bounds {
		cumulative += h.Counts[i]
		buckets[b.Seconds()] = cumulative
	}
	ch <- prometheus.MustNewConstHistogram(c.latency, h.Count, h.Sum.Seconds(), buckets, id)
}

func stateLabel(s keyspace.State) string {
	switch s {
	case keyspace.Processing:
		return "processing"
	case keyspace.Completed:
		return "completed"
	case keyspace.Failed:
		return "failed"
	default:
		return "poisoned"
	}
}
