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

#include <jansson.h>

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
	bool archived;	 /* read from an archive, not a directory */
};

void cg_package_files_free(struct cg_package_files *pf);
/* The bytes of one file of pf, or NULL (and *len 0) when it has none. */
const char *cg_package_file(const struct cg_package_files *pf, const char *name, size_t *len);

/* Trace id -> (archive, offset) over every index under traces/archive/. */
struct cg_archive_index;
/*
 * Load every index (an empty index when there are none). NULL with errno
 * (ENOMEM; EINVAL for an index that is not a regular file). _held also
 * keeps up to 256 archives open while the index lives, so that reading
 * each package costs no open (replay --all reads them all).
 */
struct cg_archive_index *cg_archive_index_load(const char *state_dir);
struct cg_archive_index *cg_archive_index_load_held(const char *state_dir);
void cg_archive_index_free(struct cg_archive_index *ix);

/*
 * Load trace_id's package: traces/<id>/ when it exists, else its members in
 * the archive ix names (ix NULL: load the indexes for this one lookup).
 * 0, or -1 with errno (ENOENT: no package anywhere).
 */
int cg_package_load(const char *state_dir, const struct cg_archive_index *ix, const char *trace_id,
		    struct cg_package_files *pf);

/* The package of trace_id in the archive ix names, even when a directory holds one too. */
int cg_package_load_archived(const char *state_dir, const struct cg_archive_index *ix,
			     const char *trace_id, struct cg_package_files *pf);

/* Read one file of trace_id's package (directory or archive). 0 or -1 with errno. */
int cg_package_read(const char *state_dir, const char *trace_id, const char *file, size_t cap,
		    char **p, size_t *len);

/* Has journal segment `segment` (its file name) been packed? */
bool cg_archive_exists(const char *state_dir, const char *segment);

/*
 * Remove what a crash left of packed directories being removed (each is
 * renamed out of the readers' way first). Once, before packing begins.
 */
void cg_archive_sweep(const char *state_dir);

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
	uint64_t idx_end; /* where the index's next line goes */
	uint64_t ahead;	  /* space to hold past both ends (cg_file_hold_ahead), or 0 */
	uint64_t tar_held, idx_held;
	bool appendable; /* opened for an append: a torn tail and end zeros were cut */
};
#define CG_LIVE_ARCHIVE_INIT                                                                       \
	{                                                                                          \
		-1, -1, "", 0, 0, 0, 0, 0, false                                                   \
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
 * Open segment's archive and hold la->ahead past its end now, while there is
 * room: the next packages fit even when a call fills the file system
 * meanwhile. Zeros at the end (an end-of-archive marker) are cut only
 * for_append, as an append does. 0, or -1 with errno.
 */
int cg_live_archive_ready(struct cg_live_archive *la, const char *state_dir, const char *segment,
			  bool for_append);

/*
 * Repair segment's archive after a crash while appending. The index keeps
 * its whole lines up to the last one naming a whole package (five members of
 * its trace); the lines after it go (a torn line, lines naming bytes lost at
 * a power cut). Whole packages after that package get their lines back (the
 * index is derived from the tar: a missing or emptied index is rebuilt, and
 * nothing whole is cut). Then the bytes after the last whole package are cut
 * off (*cut: how many), unless they are all zeros (an end-of-archive marker)
 * and the archive is not about to be appended to (for_append). 0 (also when
 * there is no archive), or -1 with errno.
 */
int cg_live_archive_repair(const char *state_dir, const char *segment, bool for_append,
			   uint64_t *cut);

/*
 * The tar member whose header is at pos, in a file of file_size bytes: a
 * ustar header of a regular file with a right checksum, and its data, all
 * before file_size. Its name (at most 100 bytes) into name (cap bytes), and
 * where the next header begins into *next. 0; 1 for a block of zeros (an
 * end-of-archive marker); -2 when the member runs past file_size (a torn
 * tail); -1 for anything else (not ustar, another type, a name prefix, a
 * wrong checksum).
 */
int cg_ustar_member(int fd, uint64_t pos, uint64_t file_size, char *name, size_t cap,
		    uint64_t *next);
/* The same for a header block h already read from pos. */
int cg_ustar_header(const unsigned char h[512], uint64_t pos, uint64_t file_size, char *name,
		    size_t cap, uint64_t *next);
/* The member's size from a header cg_ustar_header accepted. */
uint64_t cg_ustar_size(const unsigned char h[512]);

/*
 * Is the member name "ID/FILE", ID a valid trace id (into id, cap bytes) and
 * FILE one of a package's five (cg_package_names)? FILE's index, or -1.
 */
int cg_package_member(const char *name, char *id, size_t cap);

/* Does the index ix hold trace_id? */
bool cg_archive_index_has(const struct cg_archive_index *ix, const char *trace_id);

/*
 * replay --all's check of every archive as a whole (docs/evidence.md,
 * "Packages as archives"). Each tar, walked member by member up to the size
 * it had when ix was loaded, must be exactly packages back to back: ustar
 * members of regular files named ID/FILE (FILE one of the five), each
 * package's members together and none twice, each trace's package once over
 * all archives, each trace known to the journal (known), each package named
 * by its archive's index at its first member, and nothing after but an
 * end-of-archive marker of zeros. Index lines repeating a trace, or naming
 * one the journal does not hold, are reported too. With live (a daemon
 * holds the journal), a member cut by the size taken and the last packages
 * without index lines are in progress, not failures. Failures go to diff
 * (cg_diff_add).
 */
void cg_archive_audit(const char *state_dir, const struct cg_archive_index *ix,
		      bool (*known)(const char *trace_id, void *arg), void *arg, bool live,
		      json_t *diff);

#endif
