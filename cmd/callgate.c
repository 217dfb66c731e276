/* SPDX-License-Identifier: MIT */
/* cmd/callgate.c — placeholder; being written. */
int main(void) { return 1; }
