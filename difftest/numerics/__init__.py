"""Numbers before judgement: the resolution of printed values, request-clustered statistics,
the A/A noise floor's tests and the tolerance rule that says when two logits differ."""
