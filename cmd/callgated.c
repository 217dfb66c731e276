/* SPDX-License-Identifier: MIT */
/* cmd/callgated.c — placeholder; being written. */
int main(void)
{
	return 1;
}
