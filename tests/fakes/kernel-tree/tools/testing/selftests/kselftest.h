/* SPDX-License-Identifier: GPL-2.0 */
/* A fake kernel tree's kselftest.h: the orchestrator tests capture it, compile nothing with it. */
