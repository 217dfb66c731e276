-- SPDX-License-Identifier: MIT
--
-- callgate fleet evidence in PostgreSQL (docs/fleet.md). This file is the one
-- source of the schema: it is compiled into callgate, which runs it when
-- `callgate evidence ship` finds the schema incomplete, and installed as
-- <datadir>/callgate/fleet.sql for a DBA who prefers to create it by hand.
-- Every statement may run again on an existing schema without changing it.
--
-- What the tables hold is exactly what `callgate evidence verify` needs to
-- re-verify every host from the database alone: each journal line's bytes,
-- each signed checkpoint line, and the key pinned at the host's first ship.
-- The other columns are copies taken from those bytes for queries; verify
-- checks them against the bytes, so a view cannot be fooled by editing them.

CREATE SCHEMA IF NOT EXISTS callgate;

-- One row per log (one callgated state directory).
CREATE TABLE IF NOT EXISTS callgate.hosts (
    host          text PRIMARY KEY,  -- the log's origin, keys/evidence.origin
    hostname      text NOT NULL,     -- the machine's name at its first ship
    key_fp        text NOT NULL,     -- SHA-256 hex of the raw Ed25519 public key
    pubkey        text NOT NULL,     -- that key, PEM: pinned at the first ship
    first_shipped timestamptz NOT NULL DEFAULT now(),
    last_shipped  timestamptz
);

-- Every journal event, byte for byte.
CREATE TABLE IF NOT EXISTS callgate.events (
    host      text        NOT NULL REFERENCES callgate.hosts (host),
    seq       bigint      NOT NULL CHECK (seq > 0),
    trace     text        NOT NULL,
    tseq      bigint      NOT NULL,
    type      text        NOT NULL,
    ts        timestamptz NOT NULL,
    hash      text        NOT NULL,  -- the line's chain hash (its "hash" member)
    leaf_hash text        NOT NULL,  -- its Merkle leaf hash, SHA-256(0x00 || line), hex
    line      bytea       NOT NULL,  -- the exact journal line, its newline included
    payload   jsonb,                 -- the line's payload; NULL only when it holds \u0000
    PRIMARY KEY (host, seq)
);
CREATE INDEX IF NOT EXISTS events_trace ON callgate.events (host, trace);
CREATE INDEX IF NOT EXISTS events_type_ts ON callgate.events (type, ts);

-- Every signed checkpoint, byte for byte, with its C2SP note.
CREATE TABLE IF NOT EXISTS callgate.checkpoints (
    host text        NOT NULL REFERENCES callgate.hosts (host),
    seq  bigint      NOT NULL CHECK (seq >= 0),  -- the tree size it signs
    ts   timestamptz NOT NULL,
    line bytea       NOT NULL,  -- the checkpoints.ndjson line, its newline included
    note text,                  -- the signed note (NULL for lines older than notes)
    PRIMARY KEY (host, seq)
);

-- Who may ship each log: the database role that first shipped it. With one
-- role per host, row-level security lets a role add rows only to logs it
-- ships, and change only its own logs' last_shipped (grant UPDATE on that
-- column alone): host A's credentials had inserted host B's next event
-- (B's ship then stopped for good) and overwritten B's pinned key (s39b).
-- Everyone may read every row: verify re-checks them all. Forced, so the
-- tables' owner is bound too (a shipping role that created the schema owns
-- it); superusers and BYPASSRLS roles are not (docs/fleet.md). Logs shipped
-- before this schema belong to the role that ran it; an administrator moves
-- them: UPDATE callgate.hosts SET shipper = 'ROLE' WHERE host = 'LOG'.
ALTER TABLE callgate.hosts ADD COLUMN IF NOT EXISTS shipper text NOT NULL DEFAULT current_user;
ALTER TABLE callgate.hosts ENABLE ROW LEVEL SECURITY;
ALTER TABLE callgate.events ENABLE ROW LEVEL SECURITY;
ALTER TABLE callgate.checkpoints ENABLE ROW LEVEL SECURITY;
ALTER TABLE callgate.hosts FORCE ROW LEVEL SECURITY;
ALTER TABLE callgate.events FORCE ROW LEVEL SECURITY;
ALTER TABLE callgate.checkpoints FORCE ROW LEVEL SECURITY;
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_policies
                    WHERE schemaname = 'callgate' AND policyname = 'shipper_reads') THEN
        CREATE POLICY shipper_reads ON callgate.hosts FOR SELECT USING (true);
        CREATE POLICY shipper_adds ON callgate.hosts FOR INSERT
            WITH CHECK (shipper = current_user);
        CREATE POLICY shipper_marks ON callgate.hosts FOR UPDATE
            USING (shipper = current_user) WITH CHECK (shipper = current_user);
        CREATE POLICY shipper_reads ON callgate.events FOR SELECT USING (true);
        CREATE POLICY shipper_adds ON callgate.events FOR INSERT
            WITH CHECK (EXISTS (SELECT 1 FROM callgate.hosts h
                                 WHERE h.host = events.host AND h.shipper = current_user));
        CREATE POLICY shipper_reads ON callgate.checkpoints FOR SELECT USING (true);
        CREATE POLICY shipper_adds ON callgate.checkpoints FOR INSERT
            WITH CHECK (EXISTS (SELECT 1 FROM callgate.hosts h
                                 WHERE h.host = checkpoints.host
                                   AND h.shipper = current_user));
    END IF;
END
$$;

-- Denials by rule, per host and per day (UTC): every call whose reply was a
-- refusal (type D: denied by policy, refused by an approver, approval timed out).
-- A call refused at once is one 'refusal' event, its rule in its decision.
CREATE OR REPLACE VIEW callgate.denials_by_rule AS
SELECT host,
       (ts AT TIME ZONE 'UTC')::date AS day,
       COALESCE(payload->>'rule_id',
                payload->'decision'->>'rule_id') AS rule_id,
       payload->'reply'->>'code'     AS code,
       count(*)                      AS denials
  FROM callgate.events
 WHERE type IN ('verdict', 'refusal') AND payload->'reply'->>'type' = 'D'
 GROUP BY 1, 2, 3, 4;

-- Who approved what: every answer to a call that waited for a human or a
-- grant, with the command it was asked for and who asked.
CREATE OR REPLACE VIEW callgate.approvals AS
SELECT a.host,
       a.trace,
       a.payload->>'outcome'                      AS outcome,  -- approved, denied, grant, timeout, withdrawn
       (a.payload->>'uid')::bigint                AS approver_uid,
       a.payload->>'grant_id'                     AS grant_id,
       a.payload->>'why'                          AS why,
       r.payload->'request'->'pipeline'           AS command,
       r.payload->'request'->>'reason'            AS reason,
       (r.payload->'peer'->>'uid')::bigint        AS requester_uid,
       a.ts                                       AS answered_at
  FROM callgate.events a
  JOIN callgate.events r
    ON r.host = a.host AND r.trace = a.trace AND r.type = 'request'
 WHERE a.type = 'approval.answered';
