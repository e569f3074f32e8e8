"""YAML in and out, as Helm reads it: `inputs` (the input policy: regular files only, size
limits, UTF-8, references kept inside the spec's folder), `loader` (Helm-flavoured YAML typing
and loading with positions and positioned errors) and `writer` (YAML Helm reads back alike).
Each name has one home; import it from its module."""
