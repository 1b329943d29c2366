"""What people read: pytest-html extras, SVG plots, self-contained pages, CSV."""
