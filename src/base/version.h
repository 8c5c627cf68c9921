/* SPDX-License-Identifier: MIT */
/* version: the release string reported by the CLI and the server (system_fingerprint). */
#ifndef VERITY_BASE_VERSION_H
#define VERITY_BASE_VERSION_H

#define VERITY_VERSION "0.1.0"

#endif
