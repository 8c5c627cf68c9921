/* SPDX-License-Identifier: MIT */
/* placeholder main, replaced below */
int main(void) { return 0; }
