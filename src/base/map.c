/* SPDX-License-Identifier: MIT */
/*
 * map — the one string-keyed hash map of the tree.
 *
 * Open addressing with linear probing over a power-of-two table kept at most
 * half full, keys copied in, values owned by the caller. Removal shifts the
 * following entries back (no tombstones), so lookups stay short after many
 * deletions (the replay window, the journal's open traces).
 *
 * It is on the decide path (the policy's executable index is one): lookups
 * MUST NOT allocate, lock or make system calls.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

struct smap_ent {
	char *key; /* NULL: empty slot */
	uint64_t hash;
	void *value;
};

struct cg_smap {
	struct smap_ent *e;
	size_t cap, count; /* cap is a power of two */
};

uint64_t cg_hash_str(const char *s)
{
	uint64_t h = 1469598103934665603ULL; /* FNV-1a */
	for (; *s; s++) {
		h ^= (unsigned char)*s;
		h *= 1099511628211ULL;
	}
	return h;
}

struct cg_smap *cg_smap_new(void)
{
	struct cg_smap *m = calloc(1, sizeof(*m));
	if (!m)
		return NULL;
	m->cap = 16;
	m->e = calloc(m->cap, sizeof(*m->e));
	if (!m->e) {
		free(m);
		return NULL;
	}
	return m;
}

void cg_smap_free(struct cg_smap *m, void (*free_value)(void *))
{
	if (!m)
		return;
	for (size_t i = 0; i < m->cap; i++) {
		if (!m->e[i].key)
			continue;
		if (free_value)
			free_value(m->e[i].value);
		free(m->e[i].key);
	}
	free(m->e);
	free(m);
}

/* The slot holding key, or the empty slot where it would go. */
static size_t slot_of(const struct cg_smap *m, const char *key, uint64_t h)
{
	size_t i = h & (m->cap - 1);
	while (m->e[i].key && (m->e[i].hash != h || strcmp(m->e[i].key, key) != 0))
		i = (i + 1) & (m->cap - 1);
	return i;
}

void *cg_smap_get(struct cg_smap *m, const char *key)
{
	if (!m)
		return NULL;
	size_t i = slot_of(m, key, cg_hash_str(key));
	return m->e[i].key ? m->e[i].value : NULL;
}

static int grow(struct cg_smap *m)
{
	size_t ncap = m->cap * 2;
	struct smap_ent *ne = calloc(ncap, sizeof(*ne));
	if (!ne)
		return -1;
	for (size_t i = 0; i < m->cap; i++) {
		if (!m->e[i].key)
			continue;
		size_t j = m->e[i].hash & (ncap - 1);
		while (ne[j].key)
			j = (j + 1) & (ncap - 1);
		ne[j] = m->e[i];
	}
	free(m->e);
	m->e = ne;
	m->cap = ncap;
	return 0;
}

int cg_smap_put(struct cg_smap *m, const char *key, void *value)
{
	if ((m->count + 1) * 2 > m->cap && grow(m) != 0) {
		errno = ENOMEM;
		return -1;
	}
	uint64_t h = cg_hash_str(key);
	size_t i = slot_of(m, key, h);
	if (m->e[i].key) {
		m->e[i].value = value;
		return 0;
	}
	char *k = strdup(key);
	if (!k) {
		errno = ENOMEM;
		return -1;
	}
	m->e[i] = (struct smap_ent){ .key = k, .hash = h, .value = value };
	m->count++;
	return 0;
}

void *cg_smap_del(struct cg_smap *m, const char *key)
{
	if (!m)
		return NULL;
	size_t i = slot_of(m, key, cg_hash_str(key));
	if (!m->e[i].key)
		return NULL;
	void *value = m->e[i].value;
	free(m->e[i].key);
	m->e[i].key = NULL;
	m->count--;
	/* Shift back every entry of the run after i whose home lies at or before the hole. */
	size_t hole = i;
	for (size_t j = (i + 1) & (m->cap - 1); m->e[j].key; j = (j + 1) & (m->cap - 1)) {
		size_t home = m->e[j].hash & (m->cap - 1);
		bool movable = hole <= j ? (home <= hole || home > j) : (home <= hole && home > j);
		if (movable) {
			m->e[hole] = m->e[j];
			m->e[j].key = NULL;
			hole = j;
		}
	}
	return value;
}

void cg_smap_each(struct cg_smap *m, void (*fn)(const char *key, void *value, void *arg), void *arg)
{
	for (size_t i = 0; m && i < m->cap; i++)
		if (m->e[i].key)
			fn(m->e[i].key, m->e[i].value, arg);
}

size_t cg_smap_count(const struct cg_smap *m)
{
	return m ? m->count : 0;
}

void cg_strv_free(char **v, size_t n)
{
	for (size_t i = 0; v && i < n; i++)
		free(v[i]);
	free(v);
}
