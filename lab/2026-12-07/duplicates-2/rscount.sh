#!/bin/bash
# The counting rule of lab/2026-12-07/duplicates.md: every Rust file git knows, copied into a plain folder, `duplicates --most 200` there.
# usage: rscount.sh WORKTREE OUTFILE (OUTFILE an absolute path)
W=$1; D=/tmp/i44j-rs; rm -rf $D; mkdir -p $D
cd $W && git ls-files -co --exclude-standard '*.rs' | while read f; do mkdir -p $D/$(dirname $f); cp $f $D/$f; done
cd $D && duplicates --seconds 300 --most 200 > $2
