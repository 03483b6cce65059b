"""The lake-wide HTML report: ``html`` renders a page of sections, ``build`` assembles the report."""
