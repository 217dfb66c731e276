/* SPDX-License-Identifier: MIT */
/*
 * retention — trace packages packed into archives (issue 14, item 5): every
 * package of the traces sealed (or marked incomplete) in one journal segment,
 * in one POSIX tar, traces/archive/<segment>.tar, with a text index beside it
 * (<segment>.idx: "TRACE-ID OFFSET\n" per trace, OFFSET being where the
 * trace's first member header starts). Members are "<trace-id>/<file>", the
 * package's files byte for byte, a trace's members together.
 *
 * An archive is a view like a package directory: replay checks every member
 * against the journal (docs/evidence.md, "Retention"). `tar`, Python's
 * tarfile and docs/verify_trace.py read it as it is.
 *
 * Invariants:
 *  - The tar and its index are written to temporary names, synced and
 *    renamed into place (the index last) before any packed directory is
 *    removed: a reader finds every package in a directory or an archive.
 *  - The index is derived data: a lie in it can only hide a package, which
 *    replay then reports as missing; it never makes a check pass.
 */
#ifndef CG_RETENTION_H
#define CG_RETENTION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CG_ARCHIVE_DIR	    "traces/archive"
#define CG_PACKAGE_FILES    8 /* at most this many members per trace are read */
#define CG_PACKAGE_FILE_CAP (64u << 20)

/* One trace's package, from its directory or from an archive. */
struct cg_package_files {
	size_t n;
	char name[CG_PACKAGE_FILES][64];
	char *data[CG_PACKAGE_FILES];
	size_t len[CG_PACKAGE_FILES];
	size_t extra;	 /* members beyond CG_PACKAGE_FILES (not read) */
	char where[300]; /* "traces/ID" or "traces/archive/S.tar:ID", for reports */
};

void cg_package_files_free(struct cg_package_files *pf);
/* The bytes of one file of pf, or NULL (and *len 0) when it has none. */
const char *cg_package_file(const struct cg_package_files *pf, const char *name, size_t *len);

/* Trace id -> (archive, offset) over every index under traces/archive/. */
struct cg_archive_index;
/* Load every index (an empty index when there are none). NULL on ENOMEM. */
struct cg_archive_index *cg_archive_index_load(const char *state_dir);
void cg_archive_index_free(struct cg_archive_index *ix);

/*
 * Load trace_id's package: traces/<id>/ when it exists, else its members in
 * the archive ix names (ix NULL: load the indexes for this one lookup).
 * 0, or -1 with errno (ENOENT: no package anywhere).
 */
int cg_package_load(const char *state_dir, const struct cg_archive_index *ix, const char *trace_id,
		    struct cg_package_files *pf);

/* Read one file of trace_id's package (directory or archive). 0 or -1 with errno. */
int cg_package_read(const char *state_dir, const char *trace_id, const char *file, size_t cap,
		    char **p, size_t *len);

/* Has journal segment `segment` (its file name) been packed? */
bool cg_archive_exists(const char *state_dir, const char *segment);

/*
 * Pack the packages of every trace sealed or marked incomplete in journal
 * segment `segment` (its file name) that has a directory under traces/, then
 * remove those directories. *packed: how many. 0, or -1 with why (nothing
 * removed then).
 */
int cg_archive_pack_segment(const char *state_dir, const char *segment, size_t *packed, char *why,
			    size_t why_len);

/*
 * Packages appended to their segment's archive as they are sealed (policy
 * evidence.packages: archive; docs/evidence.md "Packages as archives"): the
 * same tar and index as above, written by the package thread, one trace's
 * five members at a time (hand-written ustar headers, no libarchive), then
 * its index line. A live archive has no end-of-archive blocks (tar and
 * Python's tarfile read it as it is); a reader finds a package only once
 * its index line is there, and the line comes after the members.
 */
struct cg_live_archive {
	int tar_fd, idx_fd;
	char segment[40]; /* the journal segment whose archive is open, or "" */
	uint64_t end;	  /* where the next member goes */
};
#define CG_LIVE_ARCHIVE_INIT                                                                       \
	{                                                                                          \
		-1, -1, "", 0                                                                      \
	}

/*
 * Append trace_id's package (pk, rendered) to the archive of journal
 * segment `segment` (its file name), opening it (and repairing a torn
 * tail) when the segment differs from the open one. 0, or -1 with errno.
 */
struct cg_package;
int cg_live_archive_append(struct cg_live_archive *la, const char *state_dir, const char *segment,
			   const char *trace_id, const struct cg_package *pk);
void cg_live_archive_close(struct cg_live_archive *la);

/*
 * Cut a torn tail off segment's archive (a crash while appending): an
 * index line without a newline, from the last line back every line whose
 * trace's five members are not all there, and any bytes after the last
 * whole package. 0 (also when there is no archive), or -1 with errno.
 */
int cg_live_archive_repair(const char *state_dir, const char *segment);

/* Does the index ix hold trace_id? */
bool cg_archive_index_has(const struct cg_archive_index *ix, const char *trace_id);

#endif
