BEGIN TRANSACTION;
CREATE TABLE deliveries (
	id INTEGER NOT NULL, 
	transition_id INTEGER NOT NULL, 
	guard VARCHAR NOT NULL, 
	kind VARCHAR NOT NULL, 
	channel VARCHAR NOT NULL, 
	state VARCHAR NOT NULL, 
	attempts INTEGER NOT NULL, 
	next_try DATETIME NOT NULL, 
	last_error VARCHAR, 
	created DATETIME NOT NULL, 
	sent_at DATETIME, 
	PRIMARY KEY (id)
);
CREATE TABLE file_positions (
	"key" VARCHAR NOT NULL, 
	dev INTEGER NOT NULL, 
	ino INTEGER NOT NULL, 
	path VARCHAR NOT NULL, 
	"offset" INTEGER NOT NULL, 
	head_len INTEGER NOT NULL, 
	head_hash BLOB NOT NULL, 
	size INTEGER NOT NULL, 
	lines INTEGER NOT NULL, 
	updated_at DATETIME NOT NULL, 
	PRIMARY KEY ("key")
);
INSERT INTO "file_positions" VALUES('1:2',1,2,'/logs/a.log',60,10,X'68686868686868686868686868686868',60,1,'2026-11-29 10:30:15.250000');
CREATE TABLE firings (
	id INTEGER NOT NULL, 
	guard VARCHAR NOT NULL, 
	ts DATETIME NOT NULL, 
	ts_from_line BOOLEAN NOT NULL, 
	read_at DATETIME NOT NULL, 
	path VARCHAR NOT NULL, 
	file_key VARCHAR NOT NULL, 
	"offset" INTEGER NOT NULL, 
	line VARCHAR NOT NULL, 
	run_id INTEGER, 
	PRIMARY KEY (id)
);
INSERT INTO "firings" VALUES(1,'citation','2026-11-29 09:05:01.000000',1,'2026-11-29 10:30:15.250000','/logs/a.log','1:2',0,'CitationGuard: rejected x',NULL);
CREATE TABLE heartbeat (
	id INTEGER NOT NULL, 
	pid INTEGER NOT NULL, 
	started DATETIME NOT NULL, 
	beat DATETIME NOT NULL, 
	files INTEGER NOT NULL, 
	proxy VARCHAR, 
	fixtures VARCHAR, 
	control VARCHAR, 
	stopped DATETIME, 
	PRIMARY KEY (id)
);
INSERT INTO "heartbeat" VALUES(1,7,'2026-11-29 09:30:15.250000','2026-11-29 10:30:15.250000',1,NULL,NULL,NULL,NULL);
CREATE TABLE hourly_activity (
	hour DATETIME NOT NULL, 
	activity INTEGER NOT NULL, 
	lines INTEGER NOT NULL, 
	bytes INTEGER NOT NULL, 
	PRIMARY KEY (hour)
);
INSERT INTO "hourly_activity" VALUES('2026-11-29 10:00:00.000000',0,1,60);
CREATE TABLE hourly_counts (
	guard VARCHAR NOT NULL, 
	hour DATETIME NOT NULL, 
	source VARCHAR NOT NULL, 
	count INTEGER NOT NULL, 
	PRIMARY KEY (guard, hour, source)
);
INSERT INTO "hourly_counts" VALUES('citation','2026-11-29 09:00:00.000000','organic',1);
CREATE TABLE meta (
	"key" VARCHAR NOT NULL, 
	value VARCHAR NOT NULL, 
	PRIMARY KEY ("key")
);
INSERT INTO "meta" VALUES('schema_version','3');
CREATE TABLE mutes (
	guard VARCHAR NOT NULL, 
	until DATETIME NOT NULL, 
	reason VARCHAR, 
	created DATETIME NOT NULL, 
	PRIMARY KEY (guard)
);
INSERT INTO "mutes" VALUES('version','2026-11-29 12:30:15.250000','deploy','2026-11-29 10:30:15.250000');
CREATE TABLE runs (
	id INTEGER NOT NULL, 
	guard VARCHAR NOT NULL, 
	canary VARCHAR NOT NULL, 
	variant INTEGER NOT NULL, 
	expect VARCHAR NOT NULL, 
	nonce VARCHAR NOT NULL, 
	started DATETIME NOT NULL, 
	finished DATETIME, 
	duration_s FLOAT, 
	verdict VARCHAR, 
	trace VARCHAR NOT NULL, 
	leaked BOOLEAN, 
	firings INTEGER NOT NULL, 
	evidence VARCHAR, 
	injected_text VARCHAR NOT NULL, 
	leak_text VARCHAR, 
	answer VARCHAR, 
	error VARCHAR, 
	PRIMARY KEY (id), 
	UNIQUE (nonce)
);
INSERT INTO "runs" VALUES(1,'citation','fake-url',0,'reject','k3v9abc','2026-11-29 10:25:15.250000','2026-11-29 10:26:15.250000',60.0,'caught','{}',NULL,0,'CitationGuard: rejected x','x','k3v9abc.example.org',NULL,NULL);
CREATE TABLE schedules (
	"key" VARCHAR NOT NULL, 
	last_run DATETIME, 
	next_due DATETIME, 
	PRIMARY KEY ("key")
);
INSERT INTO "schedules" VALUES('citation/fake-url','2026-11-29 10:25:15.250000','2026-11-29 16:30:15.250000');
CREATE TABLE transitions (
	id INTEGER NOT NULL, 
	guard VARCHAR NOT NULL, 
	at DATETIME NOT NULL, 
	status VARCHAR NOT NULL, 
	previous VARCHAR, 
	reason VARCHAR NOT NULL, 
	evidence VARCHAR, 
	PRIMARY KEY (id)
);
INSERT INTO "transitions" VALUES(1,'citation','2026-11-29 10:30:15.250000','alive',NULL,'r',NULL);
CREATE INDEX ix_firings_guard_ts ON firings (guard, ts);
CREATE INDEX ix_firings_ts ON firings (ts);
CREATE INDEX ix_firings_run_id ON firings (run_id);
CREATE INDEX ix_runs_guard_started ON runs (guard, started);
CREATE INDEX ix_transitions_guard_at ON transitions (guard, at);
CREATE INDEX ix_deliveries_state_next ON deliveries (state, next_try);
CREATE INDEX ix_deliveries_transition_id ON deliveries (transition_id);
COMMIT;
