#!/usr/bin/env bash
# Placeholder until the demo lands.
echo "demo: not yet built; see README.md" ; exit 0
