/* SPDX-License-Identifier: MIT */
/* src/kernel.c — placeholder; being written. */
#include "callgate.h"
