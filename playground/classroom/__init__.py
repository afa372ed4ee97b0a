"""The classroom: courses, assignments with their tests, submissions, grading and the gradebook.
Everything of it is here or named after it, so a feature is found from the folder names alone:

- `api` the HTTP operations (a router mounted under /api), `schemas` their bodies and answers,
  `shapes` what each viewer may see of them (hidden tests stay hidden here);
- `views` the pages, rendering templates/classroom/ with their scripts in static/js/classroom/;
- `selectors` the reads, with who may see what (404 for a non-member);
- `courses` the writes of courses, members, rosters and assignments;
- `grading` a submission and its Run button; `grading_queue` the fair queue of test runs,
  `grading_settle` finished runs turned into results, `grading_compare` output against an
  expectation, `grading_results` a result's statuses and moves;
- `adjustments` manual grading (rubric items, points with a comment); `similarity` the similarity
  report's Django-free jobs (run in bounded children) and `similarity_reports` their requests,
  task body and answers; `signals` what it tells listeners (a score changed);
- its tests in tests/playground/classroom/.

It builds on the site's models, services (runs, datasets, audit) and API base; nothing outside
imports it but urls.py (pages and router), tasks.py and celery.py (settling grading runs, making
similarity reports) and the LTI app (playground/lti), which listens to its signals.
"""
