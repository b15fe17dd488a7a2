/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The Redis scripts of lua/, embedded at build time (tools/embed-lua.sh). */
#ifndef RL_SCRIPTS_H
#define RL_SCRIPTS_H

struct lua_script {
	const char *name;	/* file name without .lua */
	const char *src;
};

extern const struct lua_script lua_scripts[];
extern const unsigned int lua_scripts_count;

#endif /* RL_SCRIPTS_H */
